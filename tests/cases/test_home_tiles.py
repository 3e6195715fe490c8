"""Every home tile's number equals the rows its link shows, for every demo role: the desk of
``manage.py load_demo`` with cases in each state a person answers, before and while the owner
is away."""

from __future__ import annotations

import datetime as dt
import io
import re
from html import unescape

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from approvals import services
from cases.kernel import SYSTEM, apply_transition, lock_case
from cases.models import Case, CustomerAccount, Status
from cases.services import case_open, staff_set_away
from tests.approvals.conftest import read_order, reload
from tests.support.fixtures import date_change

pytestmark = pytest.mark.django_db

ROLES = ("lead", "backup", "agent", "approver", "auditor")
TILE = re.compile(
    r'<tr><th scope="row"><a href="(?P<url>[^"]+)">(?P<label>[^<]+)</a></th>'
    r"<td[^>]*><strong>(?P<count>\d+)</strong>"
)


@pytest.fixture
def desk(settings):
    """The demo desk, with a case in each state that waits on a person, one overdue."""
    settings.ORDER_SYSTEM_URL = "http://orders.invalid"
    call_command("load_demo", stdout=io.StringIO())
    people = {u.username: u for u in get_user_model().objects.filter(username__in=ROLES)}
    account = CustomerAccount.objects.get(reference="ACC-100")

    def opened(n: int) -> Case:
        case, _ = case_open(
            actor=SYSTEM,
            account=account,
            request_key=f"tiles-{n}",
            order_id=f"ORD-{8000 + n}",
            kind="delivery_date",
            change=date_change(timezone.localdate() + dt.timedelta(days=7)),
        )
        return read_order(case)

    def submitted(n: int):
        return services.proposal_prepare(case=opened(n), actor=people["agent"])

    submitted(1)  # awaiting review: the approver's decision
    services.proposal_reject(proposal=submitted(2), actor=people["approver"], reason="No")
    held = submitted(3)
    services.proposal_approve(proposal=held, actor=people["approver"])
    with transaction.atomic():
        apply_transition(lock_case(held.case_id), "hold", actor=SYSTEM, reason="effect unknown")
        apply_transition(lock_case(opened(4).pk), "escalate", actor=SYSTEM, reason="stuck")
    late = submitted(5)
    Case.objects.filter(pk=late.case_id).update(
        follow_up_at=timezone.now() - dt.timedelta(hours=1),
        follow_up_risk_at=timezone.now() - dt.timedelta(hours=2),
    )
    risky = submitted(6)
    Case.objects.filter(pk=risky.case_id).update(follow_up_risk_at=timezone.now())
    return people


def _tiles(client) -> list[tuple[str, int, str]]:
    page = client.get(reverse("admin:index")).content.decode()
    return [
        (unescape(m["label"]), int(m["count"]), unescape(m["url"])) for m in TILE.finditer(page)
    ]


def _rows_listed(client, url: str) -> int:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.context["cl"].result_count


def _check_every_tile(client, people) -> dict[str, dict[str, int]]:
    seen: dict[str, dict[str, int]] = {}
    for role in ROLES:
        client.force_login(people[role])
        tiles = _tiles(client)
        assert len(tiles) >= 6, tiles
        for label, count, url in tiles:
            assert _rows_listed(client, url) == count, f"{role}: {label} ({url})"
        seen[role] = {label: count for label, count, _ in tiles}
    return seen


def test_every_home_tile_counts_the_rows_its_link_lists_for_every_role(client, desk):
    seen = _check_every_tile(client, desk)
    mine = {role: counts["Mine to answer now"] for role, counts in seen.items()}
    # The lead answers the rejected, held and escalated cases; the approver the three reviews
    # (one of them at risk, one overdue); nobody else waits on the others.
    assert mine == {"lead": 3, "backup": 0, "agent": 0, "approver": 3, "auditor": 0}
    assert seen["lead"]["Overdue follow-up"] >= 1
    assert seen["lead"]["Follow-up at risk"] >= 1

    staff_set_away(user=desk["lead"], away_until=timezone.localdate(), actor=desk["lead"])
    seen = _check_every_tile(client, desk)
    assert seen["backup"]["Mine to answer now"] == 3
    assert seen["lead"]["Mine to answer now"] == 0


def test_a_case_waiting_on_the_approvers_or_a_worker_is_not_mine_to_answer(client, desk):
    """The issue's count: the backup's "mine" held cases waiting on the approvers and the
    order system; the approver's held none of the decisions they may take."""
    lead = desk["lead"]
    waiting = Case.objects.exclude(waiting_on="owner").filter(owner=lead).open()
    assert waiting.filter(status=Status.AWAITING_REVIEW).exists()
    assert waiting.filter(status=Status.WAITING_SOURCE).exists()
    client.force_login(lead)
    url = reverse("admin:cases_case_changelist") + f"?answer={lead.pk}"
    listed = {c.pk for c in client.get(url).context["cl"].result_list}
    assert listed.isdisjoint(set(waiting.values_list("pk", flat=True)))
    assert reload(Case.objects.get(reference="D-41")).status == Status.WAITING_SOURCE


def test_a_held_case_the_workers_still_settle_is_nobodys_until_they_give_up(client, desk):
    """Issue 24: a held case the workers are still settling (their next look is scheduled and
    the order system is autonomous for its kind) is in nobody's "Mine to answer now"; it is
    the lead's again once the workers will not look again. Every tile still equals its list."""
    from reconciliation.models import Autonomy, OrderSystemProfile

    OrderSystemProfile.objects.create(
        base_url="http://orders.invalid",
        sandbox_order_id="ORD-PROBE",
        reachable=True,
        autonomy=Autonomy.AUTONOMOUS,
        autonomy_reason="Every capability was verified by probing.",
        kind_autonomy={"delivery_date": Autonomy.AUTONOMOUS},
    )
    held = Case.objects.get(status=Status.HELD, kind="delivery_date", owner=desk["lead"])
    Case.objects.filter(pk=held.pk).update(next_check_at=timezone.now() + dt.timedelta(minutes=5))

    seen = _check_every_tile(client, desk)
    assert seen["lead"]["Mine to answer now"] == 2
    assert seen["backup"]["Mine to answer now"] == 0

    Case.objects.filter(pk=held.pk).update(next_check_at=None)  # the workers gave up
    seen = _check_every_tile(client, desk)
    assert seen["lead"]["Mine to answer now"] == 3
