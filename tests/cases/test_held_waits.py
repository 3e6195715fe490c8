"""Issue 24: a held case the workers are still settling waits on nobody yet (``cases.held``).

One rule, asked by every reader: while the workers look again on their own and may settle the
kind, no person's follow-up clock runs, the case is in nobody's "Mine to answer now" and nobody
is told it is held; when the workers give up (their checks ran out) it becomes the responsible
person's: their clock starts, it is theirs to answer and they are told, once. Cases are held by
the real apply against the live reference order system and reconciled by the real workers.
"""

from __future__ import annotations

import pytest

from cases.held import held_waits_on_person, workers_settle
from cases.inbox import cases_to_answer
from cases.models import Notification, NotificationKind, Status, WaitReason
from cases.next_action import describe_next_action
from reconciliation.apply import apply_case
from reconciliation.settle import case_reconcile
from tests.cases.helpers import reload

pytestmark = pytest.mark.order_system


def _held(approved_case, live_orders):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix=f"/orders/{case.order_id}/operations")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    live_orders.clear_faults()
    return reload(case)


def _held_told(case) -> list[str]:
    return list(
        Notification.objects.filter(case=case, kind=NotificationKind.HELD).values_list(
            "recipient__username", flat=True
        )
    )


def test_a_held_case_is_nobodys_while_the_workers_settle_it_and_the_leads_when_they_give_up(
    approved_case, live_orders, settings, lead
):
    settings.RECONCILE_ATTEMPT_LIMIT = 2
    case = _held(approved_case, live_orders)

    # The workers settle it: no clock, nobody's to answer, nobody told; the page agrees.
    assert case.status == Status.HELD
    assert workers_settle(case)
    assert not held_waits_on_person(case)
    assert case.follow_up_at is None
    assert case.follow_up_reason is None
    assert case not in cases_to_answer(lead)
    assert _held_told(case) == []
    assert describe_next_action(case).who_must_answer.startswith("nobody yet")

    # One more look that finds nothing: still the workers', still nobody's.
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}/fence", times=2)
    assert case_reconcile(case_id=case.pk) == "still held"
    case = reload(case)
    assert workers_settle(case)
    assert case.follow_up_at is None
    assert case not in cases_to_answer(lead)
    assert _held_told(case) == []

    # The checks run out: the lead's now, with a clock, and told once.
    assert case_reconcile(case_id=case.pk) == "still held: a person settles it"
    case = reload(case)
    assert held_waits_on_person(case)
    assert case.follow_up_reason == WaitReason.HELD
    assert case.follow_up_at is not None
    assert case in cases_to_answer(lead)
    assert _held_told(case) == [lead.username]


def test_a_held_case_of_a_kind_the_workers_may_no_longer_settle_is_the_persons(
    approved_case, live_orders, lead, autonomous
):
    """The probe no longer proves the kind: the case is the lead's to answer at once (the
    page and the tile ask the same rule); the workers' next look hands it over, which starts
    the clock and tells the lead, once."""
    case = _held(approved_case, live_orders)
    assert workers_settle(case)
    assert case not in cases_to_answer(lead)
    autonomous.kind_autonomy = {**autonomous.kind_autonomy, case.kind: "review_only"}
    autonomous.save(update_fields=["kind_autonomy"])

    assert held_waits_on_person(case)
    assert case in cases_to_answer(lead)
    assert not describe_next_action(case).who_must_answer.startswith("nobody yet")

    assert case_reconcile(case_id=case.pk) == "manual settlement needed"
    case = reload(case)
    assert case.follow_up_reason == WaitReason.HELD
    assert case.follow_up_at is not None
    assert _held_told(case) == [lead.username]
    assert case_reconcile(case_id=case.pk) == "manual settlement needed"
    assert _held_told(reload(case)) == [lead.username]


def test_the_case_list_and_the_api_say_whom_a_held_case_waits_on_by_the_same_rule(
    approved_case, live_orders, settings, lead, api, client
):
    """What the API's ``waiting_on`` and the case list's column and filter say of a held case
    is ``cases.held``'s answer: a background worker while the workers settle it, the person
    once their checks ran out. (The stored value said the person all along: the API listed a
    case the workers were settling under ``waiting_on=owner``, and the list under "The
    responsible person", while the page said nobody yet.)"""
    settings.RECONCILE_ATTEMPT_LIMIT = 1
    case = _held(approved_case, live_orders)
    assert workers_settle(case)
    client.force_login(lead)
    changelist = "/admin/cases/case/"

    def api_says() -> tuple[str, set[str], set[str]]:
        one = api(lead).get(f"/api/cases/{case.reference}/").json()["waiting_on"]
        listed = {
            value: {
                c["reference"]
                for c in api(lead).get(f"/api/cases/?waiting_on={value}").json()["results"]
            }
            for value in ("worker", "owner")
        }
        return one, listed["worker"], listed["owner"]

    def list_says() -> tuple[set[str], set[str], bytes]:
        rows = {}
        for value in ("worker", "owner"):
            page = client.get(changelist, {"waiting_on__exact": value})
            assert page.status_code == 200
            rows[value] = {c.reference for c in page.context["cl"].result_list}
        return rows["worker"], rows["owner"], client.get(changelist).content

    one, workers, owners = api_says()
    assert one == "worker"
    assert case.reference in workers
    assert case.reference not in owners
    workers, owners, page = list_says()
    assert case.reference in workers
    assert case.reference not in owners
    assert b"A background worker" in page

    # The checks run out: the responsible person's, by every reader.
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}/fence", times=1)
    assert case_reconcile(case_id=case.pk) == "still held: a person settles it"
    assert held_waits_on_person(reload(case))
    one, workers, owners = api_says()
    assert one == "owner"
    assert case.reference in owners
    assert case.reference not in workers
    workers, owners, _page = list_says()
    assert case.reference in owners
    assert case.reference not in workers


def test_a_list_reads_whom_its_held_rows_wait_on_in_its_own_query(
    approved_case, live_orders, lead, api, client
):
    """The case list and the API's list compute whom each row waits on in the page's own query
    (``cases.held.with_waiting_on``): more held rows cost no more queries (each held row asked
    the order system's profile once, seven queries more at 1M cases in ``make bench``)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(lead)

    def queries() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as on_api:
            assert api(lead).get("/api/cases/").status_code == 200
        with CaptureQueriesContext(connection) as on_list:
            assert client.get("/admin/cases/case/").status_code == 200
        return len(on_api.captured_queries), len(on_list.captured_queries)

    first = _held(approved_case, live_orders)
    assert workers_settle(first)
    queries()  # warm: sessions, content types
    one = queries()
    for _ in range(2):
        assert workers_settle(_held(approved_case, live_orders))
    assert queries() == one
