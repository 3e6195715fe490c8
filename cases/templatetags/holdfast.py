"""The admin home: what needs a person now, and how much autonomy the workers have."""

from __future__ import annotations

from django import template
from django.urls import reverse

from cases import selectors
from cases.models import Status

register = template.Library()


@register.inclusion_tag("admin/holdfast_dashboard.html", takes_context=True)
def holdfast_dashboard(context):
    from approvals.selectors import review_queue_for
    from reconciliation.selectors import current_autonomy

    user = context["request"].user
    cases = selectors.cases_for(user)
    changelist = reverse("admin:cases_case_changelist")
    queues = [
        (
            "Mine to answer now",
            cases.open().responsible(user).count(),
            f"{changelist}?responsible={user.pk}",
        ),
        (
            "Held: reconcile from evidence",
            cases.filter(status=Status.HELD).count(),
            f"{changelist}?status__exact=held",
        ),
        (
            "Needs attention",
            cases.filter(status=Status.NEEDS_ATTENTION).count(),
            f"{changelist}?status__exact=needs_attention",
        ),
        ("Overdue follow-up", cases.overdue().count(), f"{changelist}?overdue=yes"),
        (
            "Proposals awaiting review",
            review_queue_for(user).count(),
            reverse("admin:approvals_proposal_changelist") + "?status=awaiting_review",
        ),
    ]
    return {"queues": queues, "autonomy_status": current_autonomy()}
