"""Every change kind through the same safety core, against the real reference order system.

The core never names a kind's field: a delivery date, a shipping address and an order
cancellation go through the same source check, proposal, four-eyes approval, claim, apply,
effect-unknown hold and settlement, and the order system's own records show what happened.
Wherever the core matches an operation found at the order system with the intent, it compares
the whole change: a key found holding another change of the same kind stays held.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone

from approvals.grants import grant_issue
from approvals.models import Approval, Operation, Proposal
from approvals.services import proposal_approve
from cases.audit import verify_chains
from cases.codes import Action
from cases.fencing import next_fencing_token
from cases.kernel import Worker
from cases.models import Attempt, Case, CaseEvent, EvidenceReference, Status
from reconciliation.apply import RESTORE_DETECTED, apply_case
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.models import Autonomy, OrderSystemProfile
from reconciliation.restore_detection import (
    restore_detected_at_source,
    source_check_due,
    source_check_forget,
    source_verified,
)
from reconciliation.restore_recovery import recover_after_restore
from reconciliation.settle import (
    SettlementContradicted,
    SettlementUnproven,
    case_propose_reversal,
    case_reconcile,
    case_settle_manually,
)
from reconciliation.sources import source_check
from reconciliation.tasks import prepare_proposal
from tests.support.fixtures import (
    DEFAULT_ORDERS,
    address_change,
    cancellation_change,
    date_change,
    days_ahead,
)
from tests.support.order_system import SEED_ADDRESS

pytestmark = pytest.mark.order_system

WORKER = Worker("worker:test:kinds")


# Per kind: the change a case asks for, another change of the same kind, what the order system
# then shows, and the operation key's prefix. Each is built when a test asks for it, so a date
# and its check are taken on the same day, even when a run crosses midnight.
def _date_kind():
    asked = days_ahead(9)
    return (
        date_change(asked),
        date_change(days_ahead(10)),
        lambda order: order["delivery_date"] == str(asked),
        "DATE",
    )


KINDS = {
    "delivery_date": _date_kind,
    "shipping_address": lambda: (
        address_change(),
        address_change(city="Bath", postal_code="BA1 1AA"),
        lambda order: order["shipping_address"]["line1"] == "4 Quay Road",
        "ADDR",
    ),
    "order_cancellation": lambda: (
        cancellation_change("customer_request"),
        cancellation_change("duplicate"),
        lambda order: order["status"] == "cancelled",
        "CANCEL",
    ),
}


def _applied(live_orders, order_id: str) -> list[dict]:
    return live_orders.state(order_id)["operations"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_read_proposed_approved_applied_once_and_told(
    approved_case, live_orders, kind
):
    change, _, applied, prefix = KINDS[kind]()
    case = approved_case(change=change)
    evidence = EvidenceReference.objects.get(case=case, kind="order_read")
    seen = {
        "delivery_date": f"delivery on {days_ahead(3):%a %Y-%m-%d}",
        "shipping_address": "shipping to Goods In, 1 Dock Road, BS1 6XX Bristol, GB",
        "order_cancellation": "order open",
    }[kind]
    assert evidence.summary == f"Order {case.order_id}: {seen}, version 1"

    assert apply_case(case_id=case.pk) == "done"

    case.refresh_from_db()
    operation = Operation.objects.get(case=case)
    assert case.status == Status.DONE
    assert operation.key == f"{prefix}-{case.number}-1"
    assert operation.change == case.change
    records = _applied(live_orders, case.order_id)
    assert [(r["operation_key"], r["change"]) for r in records] == [(operation.key, case.change)]
    assert applied(live_orders.state(case.order_id)["order"])
    [message] = mail.outbox
    assert case.change_description in message.body
    assert (kind == "order_cancellation") == ("cannot be undone" in message.body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dropped_answer_is_held_and_settled_from_evidence_with_no_second_write(
    approved_case, live_orders, kind
):
    case = approved_case(change=KINDS[kind]()[0])
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    assert Case.objects.get(pk=case.pk).status == Status.HELD

    assert case_reconcile(case_id=case.pk) == "applied"
    assert apply_case(case_id=case.pk) == "done"

    assert len(_applied(live_orders, case.order_id)) == 1
    assert Case.objects.get(pk=case.pk).status == Status.DONE


def _held_with_its_key_holding_another_change(approved_case, live_orders, kind) -> Case:
    """A held case (its worker claimed and went silent; nothing sent) whose operation key the
    order system holds applied with another change of the same kind."""
    change, other, _, _ = KINDS[kind]()
    case = approved_case(change=change)
    case_claim(case_id=case.pk, worker=WORKER)
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    operation = Operation.objects.get(case=case)
    _apply_at_the_source(live_orders, case, operation, other)
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_found_with_another_change_of_its_kind_stays_held_for_a_person(
    approved_case, live_orders, lead, kind
):
    """Settlement compares the whole change: the key is there, applied, with another change of
    the same kind (another date, address or reason), so nothing is settled on it -- neither
    by the reconciliation nor by a person's word."""
    case = _held_with_its_key_holding_another_change(approved_case, live_orders, kind)
    operation = Operation.objects.get(case=case)

    assert case_reconcile(case_id=case.pk) == "still held"
    case.refresh_from_db()
    assert case.status == Status.HELD
    assert f"{operation.key} exists with another change" in case.last_error
    assert operation.confirmed_at is None
    for outcome, refusal in (
        ("applied", SettlementContradicted),
        ("absent", SettlementUnproven),
    ):
        with pytest.raises(refusal):
            case_settle_manually(
                case=case,
                actor=lead,
                outcome=outcome,
                expected_version=case.version,
                external_reference="SCREEN-1",
                summary="The order screen",
            )
    assert Case.objects.get(pk=case.pk).status == Status.HELD
    assert Operation.objects.get(pk=operation.pk).confirmed_at is None
    assert len(_applied(live_orders, case.order_id)) == 1  # the other one, nothing from us


def test_a_key_found_applied_on_another_order_stays_held(approved_case, live_orders):
    """The key is there, applied, with the very change the case asks for -- but on another
    order: not this case's change."""
    case = approved_case(change=date_change(days_ahead(9)))
    case_claim(case_id=case.pk, worker=WORKER)
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1
    operation = Operation.objects.get(case=case)
    other_order = next(order for order in DEFAULT_ORDERS if order != case.order_id)
    _apply_at_the_source(live_orders, case, operation, case.change, order_id=other_order)

    assert case_reconcile(case_id=case.pk) == "still held"

    assert Case.objects.get(pk=case.pk).status == Status.HELD
    assert Operation.objects.get(pk=operation.pk).confirmed_at is None
    assert _applied(live_orders, case.order_id) == []


def test_the_restore_check_knows_every_kinds_operation_keys(approved_case, live_orders):
    """An operation the order system applied under a key of any kind's prefix that these
    records do not know means the records are older than the order system."""
    case = approved_case(change=address_change())
    source_verified()
    ghost = f"ADDR-{case.number + 5}-1"
    change = address_change(city="Bath", postal_code="BA1 1AA")
    with OrderSystemClient.from_settings() as client:
        client.apply_operation(
            case.order_id,
            operation_key=ghost,
            change=change,
            expected_version=1,
            fencing_token=next_fencing_token(),
            approval_grant=grant_issue(
                operation_key=ghost,
                order_id=case.order_id,
                change=change,
                approval_id="AP-77",
                expires_at=timezone.now() + dt.timedelta(hours=1),
            ),
        )

    assert f"applied {ghost}" in restore_detected_at_source(force=True)


def test_a_known_operation_applied_at_the_source_but_never_sent_here_is_a_restore(
    approved_case, live_orders
):
    """These records know the operation but show no attempt that sent it, yet the order system
    applied it: the records are older than the order system (a backup taken before the send).
    It is detected before any claim, recovery settles the case from the consistent lookup, and
    nothing is written a second time."""
    case = approved_case(change=address_change())
    operation = Operation.objects.get(case=case)
    source_verified()
    _apply_at_the_source(live_orders, case, operation, case.change)
    assert not operation.attempts.exists()

    why = restore_detected_at_source(force=True)
    assert f"applied {operation.key}" in why
    assert "no attempt that sent it" in why

    source_check_forget()  # the next claim compares with the order system first
    outcome = apply_case(case_id=case.pk)
    assert outcome.startswith(RESTORE_DETECTED), outcome
    assert not Attempt.objects.filter(case=case, submitted_at__isnull=False).exists()
    assert Operation.objects.get(pk=operation.pk).confirmed_at is not None
    assert Case.objects.get(pk=case.pk).status != Status.HELD
    assert [r["operation_key"] for r in _applied(live_orders, case.order_id)] == [operation.key]


def test_a_first_send_answered_already_applied_is_taken_as_a_sign_of_a_restore(
    approved_case, live_orders
):
    """The order system answers the first send of an operation with "already applied"
    (replayed) although no attempt of these records sent it: they are older than the order
    system. The change is confirmed (nothing is written twice) and the fact is recorded, and
    the next claim compares with the order system again."""
    case = approved_case(change=address_change())
    operation = Operation.objects.get(case=case)
    _apply_at_the_source(live_orders, case, operation, case.change)
    source_verified()  # a clean comparison just before: the claim does not ask again

    apply_case(case_id=case.pk)

    replay = CaseEvent.objects.get(case=case, action=Action.RESTORE_UNEXPECTED_REPLAY)
    assert replay.detail["operation_key"] == operation.key
    assert source_check_due()
    assert Operation.objects.get(pk=operation.pk).confirmed_at is not None
    assert [r["operation_key"] for r in _applied(live_orders, case.order_id)] == [operation.key]
    # What followed the apply there is unknown: the customer may already have been told, so
    # nothing is sent and a person is asked (a replay is never taken for a first application,
    # which skips that look). The finding, recorded before the step's events, stays in the chain.
    assert mail.outbox == []
    assert CaseEvent.objects.filter(case=case, action=Action.NOTIFICATION_MAY_HAVE_GONE).exists()
    case.refresh_from_db()
    assert "may already have gone" in case.outstanding_question
    assert verify_chains(case_reference=case.reference).ok


def test_a_first_send_answered_already_applied_with_nobody_to_tell_keeps_the_chain_whole(
    approved_case, live_orders, account
):
    """With no address, the answer's step, the notification's step and the close are written
    together; the replay's finding was recorded before them, so they link to it, not to the
    head read with the case's lock."""
    account.email = ""
    account.save(update_fields=["email"])
    case = approved_case(change=address_change())
    operation = Operation.objects.get(case=case)
    _apply_at_the_source(live_orders, case, operation, case.change)
    source_verified()

    assert apply_case(case_id=case.pk) == "done"

    assert CaseEvent.objects.filter(case=case, action=Action.RESTORE_UNEXPECTED_REPLAY).exists()
    assert verify_chains(case_reference=case.reference).ok
    assert [r["operation_key"] for r in _applied(live_orders, case.order_id)] == [operation.key]


def test_recovery_after_a_restore_keeps_a_key_found_with_another_change_held(
    approved_case, live_orders
):
    """Recovery settles each suspect case with the same fence-then-look as any reconciliation:
    a key the order system holds with another change is not this case's change."""
    case = _held_with_its_key_holding_another_change(approved_case, live_orders, "delivery_date")
    operation = Operation.objects.get(case=case)

    summary = recover_after_restore(progress=lambda line: None)

    assert summary["outcomes"] == {"still held": 1}
    assert Case.objects.get(pk=case.pk).status == Status.HELD
    assert Operation.objects.get(pk=operation.pk).confirmed_at is None


def _apply_at_the_source(
    live_orders, case: Case, operation: Operation, change: dict, order_id: str = ""
) -> None:
    """The order system applies ``operation``'s key with ``change`` (on ``order_id``, by
    default the case's order), as a send these records do not show would have."""
    order_id = order_id or case.order_id
    grant = grant_issue(
        operation_key=operation.key,
        order_id=order_id,
        change=change,
        approval_id="AP-ELSEWHERE",
        expires_at=timezone.now() + dt.timedelta(hours=1),
    )
    with OrderSystemClient.from_settings() as client:
        client.apply_operation(
            order_id,
            operation_key=operation.key,
            change=change,
            expected_version=live_orders.state(order_id)["order"]["version"],
            fencing_token=next_fencing_token(),
            approval_grant=grant,
        )


# --- autonomy per kind ---------------------------------------------------------------------


def test_a_kind_the_probe_did_not_prove_is_not_claimed_by_a_worker_while_others_are(
    approved_case, live_orders, settings
):
    """The claim reads its case's kind's autonomy: a cancellation the order system was not
    proven for waits for a person; a delivery date on the same order system is applied."""
    date = approved_case()
    cancel = approved_case(change=cancellation_change())
    profile = OrderSystemProfile.objects.latest()
    profile.kind_autonomy = {**profile.kind_autonomy, "order_cancellation": Autonomy.REVIEW_ONLY}
    profile.save(update_fields=["kind_autonomy"])

    assert apply_case(case_id=cancel.pk) == "refused: not_autonomous"
    assert apply_case(case_id=date.pk) == "done"

    assert not Attempt.objects.filter(case=cancel).exists()
    assert Case.objects.get(pk=cancel.pk).status == Status.READY
    assert live_orders.state(cancel.order_id)["order"]["status"] == "open"


# --- reversal through the kind ---------------------------------------------------------------


def _done_with_a_late_cancellation(approved_case, live_orders, change, agent) -> Case:
    """Applied with its answer lost, the customer's cancellation arriving during the hold:
    proven applied, the case is done and the cancellation arrived after the change."""
    from cases.services import case_cancel_request

    case = approved_case(change=change)
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    case_cancel_request(case=case, actor=agent, reason="Customer changed their mind", via="api")
    assert case_reconcile(case_id=case.pk) == "applied"
    assert apply_case(case_id=case.pk) == "done"
    case.refresh_from_db()
    assert case.has_late_cancellation()
    return case


def test_an_applied_address_change_is_reversed_by_a_new_proposal_back_to_the_seen_address(
    approved_case, live_orders, agent
):
    case = _done_with_a_late_cancellation(approved_case, live_orders, address_change(), agent)

    proposal = case_propose_reversal(case=case, actor=agent, expected_version=case.version)

    back = {k: v for k, v in SEED_ADDRESS.items() if v}  # line2 "" is left out
    assert proposal.change == {"kind": "shipping_address", "address": back}
    assert proposal.operation.key == f"ADDR-{case.number}-2"
    assert not Approval.objects.filter(proposal=proposal).exists()


def test_an_applied_cancellation_has_no_reversal(approved_case, live_orders, agent):
    from cases.actions import case_actions
    from cases.exceptions import TransitionRejected

    case = _done_with_a_late_cancellation(approved_case, live_orders, cancellation_change(), agent)

    assert "reversal" not in [action.name for action in case_actions(case, agent)]
    with pytest.raises(TransitionRejected, match="cannot be undone"):
        case_propose_reversal(case=case, actor=agent, expected_version=case.version)
    assert not Proposal.objects.filter(case=case, status=Proposal.Status.AWAITING_REVIEW)


# --- different kinds on one order (issue 23) -------------------------------------------------


def test_a_cancellation_applied_while_an_address_change_awaits_review_voids_its_proposal(
    live_orders, autonomous, make_case, approver
):
    """Different kinds on one order may be open together; the one applied first moves the
    order's version, and the source-change guard invalidates the other's proposal. Read again,
    the address change is advised that the order is cancelled, and if approved anyway the
    order system refuses it (order_not_open): it needs a person, and nothing was written."""
    address = make_case(change=address_change())
    cancel = make_case(change=cancellation_change())
    for case in (address, cancel):
        assert source_check(case_id=case.pk) == "checked"
        assert prepare_proposal(case.pk) == "submitted"
    waiting = Proposal.objects.get(case=address, status=Proposal.Status.AWAITING_REVIEW)
    proposal_approve(
        proposal=Proposal.objects.get(case=cancel, status=Proposal.Status.AWAITING_REVIEW),
        actor=approver,
    )

    assert apply_case(case_id=cancel.pk) == "done"
    assert source_check(case_id=address.pk) == "invalidated"

    waiting.refresh_from_db()
    address.refresh_from_db()
    assert waiting.status == Proposal.Status.INVALIDATED
    assert address.status == Status.WAITING_SOURCE
    assert source_check(case_id=address.pk) == "checked"
    assert "the order is cancelled, not open" in (
        EvidenceReference.objects.filter(case=address, kind="order_read").latest("pk").summary
    )
    assert prepare_proposal(address.pk) == "submitted"
    again = Proposal.objects.get(case=address, status=Proposal.Status.AWAITING_REVIEW)
    assert "is cancelled: the order system refuses it" in again.advisory_note
    proposal_approve(proposal=again, actor=approver)

    assert apply_case(case_id=address.pk) == "needs_attention"

    address.refresh_from_db()
    assert address.status == Status.NEEDS_ATTENTION
    assert "order_not_open" in address.last_error
    records = _applied(live_orders, address.order_id)
    assert [r["change"]["kind"] for r in records] == ["order_cancellation"]


@pytest.mark.postgres_only
def test_the_written_out_claim_reads_each_kinds_autonomy_as_the_orm_does(
    approved_case, live_orders
):
    """PostgreSQL reads the case's kind's autonomy inside the one claim statement
    (``kind_autonomy ->> kind``); the ORM reads the profile's map and picks the kind. Both
    read the same, for a proven kind, an unproven one and a kind the profile does not name."""
    from django.db import transaction

    from reconciliation.claims import _claim_read_orm, _claim_read_sql

    cases = {
        "delivery_date": approved_case(),
        "shipping_address": approved_case(change=address_change()),
        "order_cancellation": approved_case(change=cancellation_change()),
    }
    profile = OrderSystemProfile.objects.latest()
    profile.kind_autonomy = {
        "delivery_date": Autonomy.AUTONOMOUS,
        "shipping_address": Autonomy.REVIEW_ONLY,
    }
    profile.save(update_fields=["kind_autonomy"])

    now = timezone.now()
    read = {}
    for kind, case in cases.items():
        with transaction.atomic():
            by_sql = _claim_read_sql(now, case_id=case.pk, skip=set())
            by_orm = _claim_read_orm(now, case_id=case.pk, skip=set())
        read[kind] = (by_sql.autonomy, by_orm.autonomy)

    assert read == {
        "delivery_date": ("autonomous", "autonomous"),
        "shipping_address": ("review_only", "review_only"),
        "order_cancellation": (None, None),
    }


def test_a_refused_field_is_named_to_the_person_who_must_correct_it(approved_case, live_orders):
    """The receiver refuses an address in a country it does not ship to (``422
    invalid_field`` with the field and its message): the case needs a person, and its last
    error and the escalation's event say which field and why, as the receiver said it (they
    kept only the code and the detail: the person had to guess the field)."""
    served = live_orders.client.get("/capabilities").json().get("ship_to_countries") or []
    country = next(c for c in ("US", "CA", "AU", "JP", "BR") if c not in served)
    case = approved_case(change=address_change(country=country))

    assert apply_case(case_id=case.pk) == "needs_attention"

    case.refresh_from_db()
    assert case.status == Status.NEEDS_ATTENTION
    assert "invalid_field" in case.last_error
    assert "address.country" in case.last_error, case.last_error
    assert country in case.last_error
    escalation = CaseEvent.objects.filter(case=case, to_status=Status.NEEDS_ATTENTION).get()
    [(name, messages)] = escalation.detail["refused_fields"].items()
    assert name.endswith("address.country")
    assert any(country in message for message in messages)
    assert _applied(live_orders, case.order_id) == []
