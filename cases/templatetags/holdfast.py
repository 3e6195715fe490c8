"""The admin home: what needs a person now, who is away, and how much autonomy the workers have."""

from __future__ import annotations

import datetime as dt

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from cases import inbox, selectors
from cases.extensions import dashboard_panels, dashboard_tiles
from cases.models import StaffProfile, Status

register = template.Library()


@register.inclusion_tag("admin/holdfast_dashboard.html", takes_context=True)
def holdfast_dashboard(context):
    """The kernel's queues, then the tiles and panels the apps above it registered
    (``cases.extensions``: approvals' review queue, reconciliation's autonomy badge)."""
    request = context["request"]
    user = request.user
    cases = selectors.cases_for(user)
    changelist = reverse("admin:cases_case_changelist")
    # The case queues for who may open them: an operator (no case permission, no team) got six
    # zeros, each a link to a bare 403.
    queues = (
        []
        if not user.has_perm("cases.view_case")
        else [
            (
                "Mine to answer now",
                inbox.cases_to_answer(user, cases).count(),
                f"{changelist}?answer={user.pk}",
            ),
            (
                "Held: reconcile from evidence",
                cases.filter(status=Status.HELD).count(),
                reverse("admin:cases_heldcase_changelist"),
            ),
            (
                "Needs attention",
                cases.filter(status=Status.NEEDS_ATTENTION).count(),
                reverse("admin:cases_attentioncase_changelist"),
            ),
            ("Follow-up at risk", cases.at_risk().count(), f"{changelist}?follow_up=at_risk"),
            ("Overdue follow-up", cases.overdue().count(), f"{changelist}?overdue=yes"),
        ]
    )
    queues += [
        (tile.label, tile.count(user), tile.url())
        for tile in dashboard_tiles()
        if tile.shown_to(user)
    ]
    return {
        "queues": queues,
        "panels": [(panel.title, panel.render(request)) for panel in dashboard_panels()],
        "absence": absence_context(request),
        "intake": intake_context(request),
    }


def intake_context(request) -> dict | None:
    """The way to open a case, for those who may (agents, leads): one link per kind."""
    from cases import kinds
    from cases.admin.intake import intake_url, may_open

    if not may_open(request):
        return None
    return {
        "url": intake_url(),
        "kinds": [(kind.label, intake_url(kind=kind.code)) for kind in kinds.kinds()],
    }


def absence_context(request) -> dict:
    """Who may be marked away from the home page: oneself, and a lead's team members."""
    from cases.services import MAX_ABSENCE_DAYS, actor_may_set_away

    user = request.user
    # Staff only: an integration's user has no desk to be away from.
    team = list(selectors.team_people(user).filter(is_staff=True).select_related("staff_profile"))
    people = [person for person in team if actor_may_set_away(actor=user, user=person)]
    today = timezone.localdate()
    # Who is away is told to everyone on the teams (an agent's cases fall to the backups too),
    # not only to those who may mark them back.
    away = [
        (person, person.staff_profile.away_until)
        for person in team
        if getattr(person, "staff_profile", None) and person.staff_profile.is_away(today)
    ]
    return {
        "people": people,
        "away": away,
        "covering": _covering(user, [person.pk for person, _ in away]),
        # Those of them this user may mark back (themselves; a lead, their team's).
        "back": [(person, until) for person, until in away if person in people],
        "today": today,
        "latest": today + dt.timedelta(days=MAX_ABSENCE_DAYS),
        "url": reverse("admin:cases_staffprofile_mark_away"),
        "me": user,
        "my_profile": StaffProfile.objects.filter(user=user).first(),
    }


# How many of the cases that fell to a backup their home page names (the rest are counted).
COVERING_NAMED = 5


def _covering(user, away_ids: list[int]) -> dict | None:
    """The open cases of the people away that fell to ``user`` as their named backup: how
    many, the newest few by reference (each a link to its page), and the case list filtered to
    ``user`` as the one responsible. None when there are none. (At 1M cases: 3 ms, a bitmap of
    the open cases and of the person's as backup.)"""
    if not away_ids:
        return None
    fallen = selectors.cases_for(user).open().filter(backup=user, owner_id__in=away_ids)
    named = list(fallen.order_by("-number").values_list("pk", "reference")[: COVERING_NAMED + 1])
    if not named:
        return None
    count = len(named) if len(named) <= COVERING_NAMED else fallen.count()
    return {
        "count": count,
        "named": [
            (reference, reverse("admin:cases_case_change", args=[pk]))
            for pk, reference in named[:COVERING_NAMED]
        ],
        "more": count - min(count, COVERING_NAMED),
        "url": f"{reverse('admin:cases_case_changelist')}?responsible={user.pk}",
    }


@register.simple_tag(takes_context=True)
def holdfast_inbox_link(context):
    """The header's link to the person's inbox, with their unread count (one indexed count)."""
    user = getattr(context.get("request"), "user", None)
    if user is None or not user.is_authenticated or not user.is_staff:
        return ""
    unread = inbox.unread_count(user)
    return format_html(
        '<a href="{}" id="hf-inbox" aria-label="Inbox: {} unread">Inbox{}</a> / ',
        reverse("admin:cases_notification_changelist"),
        unread,
        format_html(' <strong class="hf-unread">({})</strong>', unread) if unread else "",
    )
