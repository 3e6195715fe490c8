"""Sentences the walks of ``make run`` read against the facts: a closed case named a person
"responsible now", a reassignment of one case said "1 cases", and the lists' times named no
zone beside pages that all say UTC."""

from __future__ import annotations

import datetime as dt

from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from cases.models import Case, Status
from cases.services import case_cancel_request, case_update_followup
from tests.cases.helpers import reload

CASE_LIST = "/admin/cases/case/"


def test_a_closed_case_is_nobodys_responsibility_now(client, lead, agent, make_case):
    case = make_case()
    case_cancel_request(case=case, actor=agent, reason="The customer withdrew", via="admin")
    case = reload(case)
    assert case.status == Status.CANCELLED
    client.force_login(lead)

    page = client.get(reverse("admin:cases_case_change", args=[case.pk])).content.decode()
    listing = client.get(CASE_LIST, {"status__exact": Status.CANCELLED})

    assert "Nobody: the case is closed (owner Lena Lead)" in page
    row = listing.context["cl"].model_admin.responsible_now_display(case)
    assert row == "—"


def test_reassigning_one_case_says_one_case(client, lead, backup, make_case):
    case = make_case()
    client.force_login(lead)

    done = client.post(
        CASE_LIST,
        {
            "action": "reassign_selected",
            "_selected_action": [case.pk],
            "apply": "1",
            "owner": backup.pk,
            "backup": lead.pk,
            "reason": "Lena is on leave",
        },
    )

    texts = [str(m) for m in get_messages(done.wsgi_request)]
    assert any(t.startswith(f"Reassigned 1 case: {case.reference}") for t in texts), texts


def test_the_case_lists_times_name_their_zone(client, lead, make_case):
    case = make_case()
    at = timezone.now() + dt.timedelta(days=2)
    case_update_followup(
        case=case, expected_version=case.version, actor=lead, next_check_at=at, reason="Callback"
    )
    client.force_login(lead)

    listing = client.get(CASE_LIST).content.decode()

    shown = f"{timezone.localtime(at):%Y-%m-%d %H:%M} UTC"
    assert shown in listing, shown
    assert Case.objects.get(pk=case.pk).next_check_at is not None
