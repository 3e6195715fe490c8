"""Retention: closed cases past their retention date lose their payload, never their audit."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.utils import timezone

from approvals.models import Operation
from cases.exceptions import ActionNotPermitted
from cases.kernel import SYSTEM
from cases.models import CancellationRequest, Case, CaseEvent, EvidenceReference, Status
from cases.retention import PurgeRefused, case_purge, purge_expired, purgeable_cases
from cases.services import case_transition, case_update_followup, evidence_record
from tests.cases.helpers import make_attempt, reload

RETENTION_DAYS = 30
PAST_RETENTION = timezone.localdate() + dt.timedelta(days=RETENTION_DAYS + 1)


@pytest.fixture(autouse=True)
def _retention_policy(settings):
    settings.CASE_RETENTION_DAYS = RETENTION_DAYS


@pytest.fixture
def closed_case(make_case, lead):
    """A cancelled case with a note, an outstanding question and one evidence reference."""

    def make(**overrides):
        case = make_case(note="Customer asked by phone; call 555-0100 after 5pm", **overrides)
        case = case_update_followup(
            case=case,
            expected_version=case.version,
            actor=lead,
            outstanding_question="Can the driver leave it with the neighbour?",
        )
        evidence_record(
            case=case,
            expected_version=case.version,
            actor=lead,
            source_system=EvidenceReference.Source.EMAIL,
            external_reference="msg-4711",
            kind="customer_request",
            permitted_basis=EvidenceReference.Basis.CONTRACT,
            summary="Customer asks to move the delivery",
        )
        case = reload(case)
        return case_transition(
            case=case,
            transition="cancel",
            expected_version=case.version,
            reason="Customer withdrew the request",
            actor=lead,
        )

    return make


def _events(case) -> list[tuple]:
    return list(
        CaseEvent.objects.filter(case=case)
        .order_by("id")
        .values_list("id", "action", "version", "reason", "detail")
    )


def _set_legal_hold(case) -> None:
    Case.objects.filter(pk=case.pk).update(legal_hold=True)


def _closed_long_ago(case) -> None:
    """As if the case had closed before its retention date passed in real time."""
    Case.objects.filter(pk=case.pk).update(
        retention_until=timezone.localdate() - dt.timedelta(days=1)
    )


# --- policy ---------------------------------------------------------------------------------------


def test_closing_a_case_sets_its_retention_date_from_the_policy(closed_case):
    case = reload(closed_case())

    assert case.status == Status.CANCELLED
    assert case.retention_until == timezone.localdate() + dt.timedelta(days=RETENTION_DAYS)


def test_a_closed_case_becomes_purgeable_only_after_its_retention_date(closed_case):
    case = closed_case()

    assert case not in purgeable_cases(today=case.retention_until)
    assert list(purgeable_cases(today=case.retention_until + dt.timedelta(days=1))) == [case]


# --- dry run and execute --------------------------------------------------------------------------


def test_dry_run_purges_nothing_and_names_what_it_would_purge(closed_case):
    case = closed_case()
    before = _events(case)

    summary = purge_expired(today=PAST_RETENTION)

    assert summary.would_purge == [case.reference]
    assert summary.purged == []
    fresh = reload(case)
    assert fresh.purged_at is None
    assert fresh.note.startswith("Customer asked by phone")
    assert EvidenceReference.objects.filter(case=case).count() == 1
    assert _events(case) == before


def test_execute_purges_payload_and_evidence_but_keeps_the_tombstone(closed_case):
    case = closed_case()
    kept = reload(case)

    summary = purge_expired(execute=True, today=PAST_RETENTION)

    assert summary.purged == [case.reference]
    tomb = reload(case)
    assert tomb.purged_at is not None
    assert (tomb.note, tomb.outstanding_question, tomb.waiting_reason, tomb.last_error) == (
        "",
        "",
        "",
        "",
    )
    assert tomb.request_key == f"purged-{case.pk}"
    assert not EvidenceReference.objects.filter(case=case).exists()
    assert (tomb.reference, tomb.account_id, tomb.status, tomb.closed_at, tomb.retention_until) == (
        kept.reference,
        kept.account_id,
        Status.CANCELLED,
        kept.closed_at,
        kept.retention_until,
    )
    assert tomb.version == kept.version + 1


def test_purge_keeps_every_event_and_adds_one_purged_event_with_counts(closed_case):
    case = closed_case()
    before = _events(case)

    purge_expired(execute=True, today=PAST_RETENTION)

    after = _events(case)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1
    _, action, version, _, detail = after[-1]
    assert action == "cases.case.purged"
    assert version == reload(case).version
    assert detail["evidence_references_deleted"] == 1
    assert set(detail["fields_blanked"]) == {"note", "outstanding_question"}
    assert detail["events_kept"] == len(before)


def test_purge_blanks_the_text_of_cancellation_requests(closed_case):
    case = closed_case()
    CancellationRequest.objects.create(
        case=case,
        reason="I moved to Leeds, cancel please",
        via="api",
        requested_by_label="customer",
        outcome=CancellationRequest.Outcome.CANCELLED,
    )

    purge_expired(execute=True, today=PAST_RETENTION)

    reasons = CancellationRequest.objects.filter(case=case).values_list("reason", flat=True)
    assert "I moved to Leeds, cancel please" not in reasons
    assert set(reasons) == {""}


def test_purge_touches_no_case_that_is_not_due(closed_case):
    due = closed_case()
    later = closed_case()
    Case.objects.filter(pk=later.pk).update(retention_until=PAST_RETENTION + dt.timedelta(days=10))

    summary = purge_expired(execute=True, today=PAST_RETENTION)

    assert summary.purged == [due.reference]
    assert summary.not_due == 1
    assert reload(later).purged_at is None
    assert EvidenceReference.objects.filter(case=later).count() == 1


def test_purging_a_case_before_its_retention_date_is_refused(closed_case):
    case = closed_case()

    with pytest.raises(PurgeRefused) as refused:
        case_purge(case=case, actor=SYSTEM, today=case.retention_until)

    assert refused.value.reasons == ["not_due"]
    assert reload(case).purged_at is None
    assert EvidenceReference.objects.filter(case=case).count() == 1


# --- what is never purged -------------------------------------------------------------------------


def test_legal_hold_blocks_purging(closed_case):
    case = closed_case()
    _set_legal_hold(case)
    before = _events(case)

    summary = purge_expired(execute=True, today=PAST_RETENTION)

    assert case not in purgeable_cases(today=PAST_RETENTION)
    assert summary.purged == []
    assert summary.skipped_codes == {case.reference: ["legal_hold"]}
    assert "legal hold" in summary.skipped[case.reference]
    assert reload(case).purged_at is None
    assert EvidenceReference.objects.filter(case=case).count() == 1
    assert _events(case) == before


def test_purging_a_case_under_legal_hold_directly_is_refused(closed_case):
    case = closed_case()
    _set_legal_hold(case)

    with pytest.raises(PurgeRefused) as refused:
        case_purge(case=case, actor=SYSTEM, today=PAST_RETENTION)

    assert refused.value.reasons == ["legal_hold"]
    assert reload(case).purged_at is None


def test_open_cases_are_never_purged(make_case):
    case = make_case(note="still being worked")
    far_future = timezone.localdate() + dt.timedelta(days=10 * 365)

    summary = purge_expired(execute=True, today=far_future)
    with pytest.raises(PurgeRefused) as refused:
        case_purge(case=case, actor=SYSTEM, today=far_future)

    assert summary.purged == []
    assert summary.open_cases == 1
    assert "open" in refused.value.reasons
    fresh = reload(case)
    assert fresh.purged_at is None
    assert fresh.note == "still being worked"


def _active_attempt(case):
    make_attempt(case)


def _pending_cancellation(case):
    CancellationRequest.objects.create(
        case=case, reason="cancel please", via="api", requested_by_label="customer"
    )


@pytest.mark.parametrize("unsettle", [_active_attempt, _pending_cancellation])
def test_closed_case_with_unsettled_work_is_not_purged(closed_case, unsettle):
    case = closed_case()
    unsettle(case)

    summary = purge_expired(execute=True, today=PAST_RETENTION)

    assert case not in purgeable_cases(today=PAST_RETENTION)
    assert summary.skipped_codes == {case.reference: ["unsettled"]}
    assert reload(case).purged_at is None
    assert EvidenceReference.objects.filter(case=case).count() == 1


def test_an_already_purged_case_is_not_purged_twice(closed_case):
    case = closed_case()
    purge_expired(execute=True, today=PAST_RETENTION)
    first = reload(case)

    again = purge_expired(execute=True, today=PAST_RETENTION + dt.timedelta(days=1))
    with pytest.raises(PurgeRefused) as refused:
        case_purge(case=case, actor=SYSTEM, today=PAST_RETENTION)

    assert again.candidates == []
    assert refused.value.reasons == ["already_purged"]
    fresh = reload(case)
    assert (fresh.version, fresh.purged_at) == (first.version, first.purged_at)
    assert CaseEvent.objects.filter(case=case, action="cases.case.purged").count() == 1


def test_a_person_without_the_lead_permission_may_not_purge(closed_case, agent):
    case = closed_case()

    with pytest.raises(ActionNotPermitted):
        case_purge(case=case, actor=agent, today=PAST_RETENTION)

    assert reload(case).purged_at is None


# --- the command ----------------------------------------------------------------------------------


def _run(*args) -> str:
    out = StringIO()
    call_command("purge_expired", *args, stdout=out)
    return out.getvalue()


def test_command_dry_run_prints_progress_what_it_would_purge_and_why_others_are_skipped(
    closed_case, make_case
):
    due = closed_case()
    held = closed_case()
    _set_legal_hold(held)
    make_case()  # open

    output = _run("--today", PAST_RETENTION.isoformat())

    assert "Dry run" in output
    assert f"[1/2] {due.reference} would purge" in output
    assert f"[2/2] {held.reference} skipped: legal hold" in output
    assert "Summary: examined 2 case(s); would purge 1; skipped 1 (legal hold: 1)." in output
    assert f"Would purge: {due.reference}" in output
    assert "Still open: 1 case(s), never purged while open." in output
    assert "--execute" in output
    assert reload(due).purged_at is None


def test_command_execute_purges_and_prints_a_summary(closed_case):
    case = closed_case()
    _closed_long_ago(case)

    output = _run("--execute")

    assert f"[1/1] {case.reference} purged" in output
    assert "Summary: examined 1 case(s); purged 1; skipped 0." in output
    assert reload(case).purged_at is not None
    assert CaseEvent.objects.filter(case=case, action="cases.case.purged").count() == 1


def test_command_refuses_to_execute_with_a_future_date(closed_case):
    case = closed_case()

    with pytest.raises(CommandError, match="future"):
        _run("--execute", "--today", PAST_RETENTION.isoformat())

    assert reload(case).purged_at is None


def test_command_rejects_a_malformed_date(db):
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        _run("--today", "31/12/2030")


# --- the event table's trigger (PostgreSQL) -------------------------------------------------------


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE cases_caseevent SET reason = 'rewritten history'",
        "DELETE FROM cases_caseevent",
        "TRUNCATE cases_caseevent CASCADE",  # approvals_proposalauthor references it
    ],
)
def test_event_table_refuses_raw_update_delete_and_truncate(closed_case, statement):
    case = closed_case()
    before = _events(case)
    with connection.cursor() as cursor:
        # The test settings open every session in maintenance mode so flushes work.
        cursor.execute("SET LOCAL holdfast.maintenance = 'off'")
        # Check the deferred foreign keys now: PostgreSQL refuses TRUNCATE with pending
        # trigger events before the table's own trigger could answer.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    with (
        pytest.raises(ProgrammingError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)

    assert _events(case) == before


# --- a personal change (an address) -------------------------------------------------------------

ADDRESS = {
    "kind": "shipping_address",
    "address": {
        "name": "Dana Whitfield",
        "line1": "4 Quay Road",
        "city": "Bristol",
        "postal_code": "BS1 5TX",
        "country": "GB",
    },
}


def _read_and_propose(case):
    """The order read (through a mock order system) and a proposal with its operation."""
    import httpx

    from approvals.services import proposal_prepare
    from cases.kernel import Worker
    from reconciliation.client import OrderSystemClient
    from reconciliation.sources import source_check

    order = {
        "order_id": case.order_id,
        "account_id": case.account.reference,
        "version": 1,
        "status": "open",
        "delivery_date": "2030-01-01",
        "shipping_address": {**ADDRESS["address"], "line1": "12 Harbour Street", "line2": ""},
    }
    timeouts = {"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=order))
    with OrderSystemClient("http://orders.test", timeouts=timeouts, transport=transport) as client:
        assert source_check(case_id=case.pk, client=client) == "checked"
    return proposal_prepare(case=reload(case), actor=Worker("worker:test"))


def test_an_address_never_enters_the_audit_trail(make_case, lead):
    from approvals.services import case_change_intent

    case = make_case(change=ADDRESS)
    _read_and_propose(case)
    moved = {**ADDRESS, "address": {**ADDRESS["address"], "line1": "9 Quay Road"}}
    case_change_intent(case=reload(case), actor=lead, change=moved, reason="Customer moved again")

    trail = " ".join(f"{reason} {detail}" for *_, reason, detail in _events(case))
    for personal in ("Dana", "Quay", "Harbour", "BS1"):
        assert personal not in trail
    assert "a new shipping address (in GB)" in trail


def test_purge_removes_a_personal_change_everywhere_and_keeps_its_kind(closed_case):
    from approvals.models import Proposal

    case = closed_case(change=ADDRESS)
    dated = closed_case()

    purge_expired(execute=True, today=PAST_RETENTION)

    gone = {"kind": "shipping_address", "purged": True}
    tomb = reload(case)
    assert (tomb.kind, tomb.change, tomb.order_seen) == ("shipping_address", gone, None)
    assert tomb.change_description == "a shipping address change (purged after retention)"
    assert reload(dated).change == dated.change  # a date is not personal: it stays
    detail = CaseEvent.objects.filter(case=case, action="cases.case.purged").get().detail
    assert {"change", "order_seen"} <= set(detail["fields_blanked"])
    assert Proposal.objects.filter(case=case).count() == 0  # cancelled before any proposal


def test_purge_removes_a_personal_change_from_the_proposal_and_the_operation(make_case, lead):
    from approvals.models import Proposal

    case = make_case(change=ADDRESS)
    proposal = _read_and_propose(case)
    case = reload(case)
    case_transition(
        case=case,
        transition="cancel",
        expected_version=case.version,
        reason="Customer withdrew",
        actor=lead,
    )

    purge_expired(execute=True, today=PAST_RETENTION)

    gone = {"kind": "shipping_address", "purged": True}
    assert Proposal.objects.get(pk=proposal.pk).change == gone
    assert Operation.objects.get(case=case).change == gone
    detail = CaseEvent.objects.filter(case=case, action="cases.case.purged").get().detail
    assert detail["change_rows_purged"] == 2
