"""Preparing and submitting one exact proposal from current evidence."""

from __future__ import annotations

import pytest
from django.db import transaction

from approvals import services
from approvals.models import Operation, Proposal
from cases import kinds
from cases.exceptions import InvalidCaseInput
from cases.models import Case, CaseEvent, EvidenceReference, Status, WaitingOn
from reconciliation import tasks as recon_tasks
from tests.support.fixtures import (
    address_change,
    cancellation_change,
    date_change,
    requested_date,
)

from .conftest import ORDER, in_days, reload


@pytest.mark.order_system
def test_prepare_task_submits_a_proposal_for_review_with_the_first_operation_key(
    checked_case, live_orders
):
    case = checked_case
    live_orders.seed(slots=[{"date": str(requested_date(case)), "capacity": 5, "taken": 2}])

    assert recon_tasks.prepare_proposal(case.pk) == "submitted"

    case = reload(case)
    proposal = Proposal.objects.get(case=case)
    assert case.status == Status.AWAITING_REVIEW
    assert case.waiting_on == WaitingOn.APPROVERS
    assert proposal.status == Proposal.Status.AWAITING_REVIEW
    assert proposal.operation.key == f"DATE-{case.number}-1"
    assert (proposal.order_id, proposal.change) == (ORDER, case.change)
    assert proposal.evidence_order_version == 1
    assert proposal.evidence_ids == list(
        EvidenceReference.objects.filter(case=case).values_list("pk", flat=True)
    )
    assert proposal.prepared_by is None
    assert proposal.prepared_by_label.startswith("proposer:")
    assert proposal.advisory_note == f"Slot {requested_date(case):%Y-%m-%d}: 2 of 5 taken"
    submitted = CaseEvent.objects.filter(case=case).latest("id")
    assert submitted.to_status == Status.AWAITING_REVIEW
    assert submitted.detail["operation_key"] == proposal.operation.key

    # Delivered twice: the second run changes nothing.
    assert recon_tasks.prepare_proposal(case.pk) == "skipped"
    assert Proposal.objects.filter(case=case).count() == 1
    assert Operation.objects.filter(case=case).count() == 1


@pytest.mark.order_system
@pytest.mark.parametrize(("capacity", "taken"), [(0, 0), (5, 5)])
def test_a_full_slot_is_advised_as_refused_not_as_free(checked_case, live_orders, capacity, taken):
    """ "Slot 2026-12-05: 0 of 0 taken" read as free; the order system refused the write."""
    case = checked_case
    date = requested_date(case)
    live_orders.seed(slots=[{"date": str(date), "capacity": capacity, "taken": taken}])

    assert recon_tasks.prepare_proposal(case.pk) == "submitted"

    assert Proposal.objects.get(case=case).advisory_note == (
        f"Slot {date:%Y-%m-%d}: {taken} of {capacity} taken; no room left: the order system "
        "refuses it unless a place frees up"
    )


def test_prepare_task_with_unreachable_slot_lookup_still_submits_with_advice_unknown(
    checked_case, settings, closed_port
):
    settings.ORDER_SYSTEM_URL = f"http://127.0.0.1:{closed_port}"
    assert recon_tasks.prepare_proposal(checked_case.pk) == "submitted"
    proposal = Proposal.objects.get(case=checked_case)
    assert proposal.advisory_note == (
        "Delivery date: the order system could not be asked (connect_failed)"
    )
    assert reload(checked_case).status == Status.AWAITING_REVIEW


def test_person_prepares_a_proposal_by_hand_with_another_confirmed_date(checked_case, agent):
    other_date = in_days(12)
    assert other_date != requested_date(checked_case)

    proposal = services.proposal_prepare(
        case=checked_case,
        actor=agent,
        change=date_change(other_date),
        advisory_note="Customer confirmed by phone",
    )

    proposal.refresh_from_db()
    assert proposal.change == {"kind": "delivery_date", "delivery_date": other_date.isoformat()}
    assert proposal.prepared_by == agent
    assert proposal.status == Proposal.Status.AWAITING_REVIEW
    assert proposal.operation.change == proposal.change
    assert proposal.operation.change_hash == kinds.change_hash(proposal.change)
    assert proposal.operation.key == f"DATE-{checked_case.number}-1"
    assert reload(checked_case).status == Status.AWAITING_REVIEW


def test_proposal_without_current_evidence_is_refused(case, agent):
    Case.objects.filter(pk=case.pk).update(status=Status.PREPARING_PROPOSAL)
    with pytest.raises(InvalidCaseInput):
        services.proposal_prepare(case=reload(case), actor=agent)
    assert not Proposal.objects.filter(case=case).exists()


def test_at_most_one_open_proposal_per_case_is_a_database_constraint(proposal):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Proposal.objects.create(
            case=proposal.case,
            order_id=proposal.order_id,
            change=date_change(in_days(9)),
            evidence_order_version=1,
            content_hash="x" * 64,
            prepared_by_label="someone",
            status=Proposal.Status.DRAFT,
        )


def test_a_proposal_of_another_kind_than_the_cases_is_refused(checked_case, agent):
    with pytest.raises(InvalidCaseInput) as refused:
        services.proposal_prepare(case=checked_case, actor=agent, change=cancellation_change())
    assert set(refused.value.fields) == {"change.kind"}
    assert not Proposal.objects.filter(case=checked_case).exists()


@pytest.mark.order_system
def test_an_address_change_is_advised_on_the_country_and_a_cancellation_that_it_is_final(
    live_orders, make_case
):
    """The advice comes from each kind: a country the order system does not ship to, and a
    cancellation that cannot be undone; an order no longer open is named for every kind."""
    from reconciliation.sources import source_check

    live_orders.seed(
        orders=[
            {
                "order_id": "ORD-SHIPPED",
                "account_id": "ACC-100",
                "delivery_date": str(in_days(3)),
                "status": "shipped",
            }
        ]
    )
    abroad = make_case(change=address_change(country="US"))
    final = make_case(change=cancellation_change())
    shipped = make_case(order_id="ORD-SHIPPED", change=address_change())
    for case in (abroad, final, shipped):
        assert source_check(case_id=case.pk) == "checked"
        assert recon_tasks.prepare_proposal(case.pk) == "submitted"

    def advice(case):
        return Proposal.objects.get(case=case).advisory_note

    assert advice(abroad) == "The order system does not ship to US: it refuses this change"
    assert advice(final) == "This cannot be undone: once applied there is no reversal"
    assert advice(shipped) == "Order ORD-SHIPPED is shipped: the order system refuses it"


@pytest.mark.order_system
def test_a_change_the_order_already_holds_is_advised_as_changing_nothing(live_orders, make_case):
    """A second request for what an earlier one applied (the order already has the date, the
    address): the approver reads, before approving, that it would be sent again for nothing.
    Before, the advice named only the slot, and the second write went through unremarked."""
    from reconciliation.sources import source_check

    date = in_days(9)
    address = address_change()["address"]
    live_orders.seed(
        orders=[
            {"order_id": "ORD-SAME-1", "account_id": "ACC-100", "delivery_date": str(date)},
            {
                "order_id": "ORD-SAME-2",
                "account_id": "ACC-100",
                "delivery_date": str(in_days(3)),
                "shipping_address": address,
            },
        ],
        slots=[{"date": str(date), "capacity": 5, "taken": 2}],
    )
    same_date = make_case(order_id="ORD-SAME-1", change=date_change(date))
    same_address = make_case(order_id="ORD-SAME-2", change=address_change())
    other_date = make_case(order_id="ORD-SAME-2", change=date_change(date))
    for case in (same_date, same_address, other_date):
        assert source_check(case_id=case.pk) == "checked"
        assert recon_tasks.prepare_proposal(case.pk) == "submitted"

    def advice(case):
        return Proposal.objects.get(case=case).advisory_note

    assert advice(same_date) == (
        f"Slot {date:%Y-%m-%d}: 2 of 5 taken; The order already has this (delivery on "
        f"{date:%a %Y-%m-%d}): approving sends it again and changes nothing; reject it if the "
        "request is met"
    )
    assert advice(same_address).startswith("The order already has this (shipping to Dana ")
    assert "already" not in advice(other_date)


def test_a_person_prepares_only_on_the_newest_order_the_desk_knows_of(checked_case, agent):
    """An order event reported version 2 after the case read version 1: a proposal prepared by
    hand then rested on version 1, went to an approver, was approved, and the apply threw it
    away. It is refused, saying to read the order again; nothing is written."""
    from cases.kernel import Worker, lock_case
    from cases.services import evidence_add

    case = reload(checked_case)
    with transaction.atomic():
        evidence_add(
            case=lock_case(case.pk),
            actor=Worker("webhook"),
            source_system=EvidenceReference.Source.ORDER_SYSTEM,
            external_reference="event:evt-2",
            kind="order_event",
            permitted_basis=EvidenceReference.Basis.CONTRACT,
            summary=f"Order {ORDER} changed to version 2",
            order_version=2,
        )
    proposals = Proposal.objects.count()

    with pytest.raises(InvalidCaseInput) as refused:
        services.proposal_prepare_by_hand(
            case=case,
            actor=agent,
            change=date_change(in_days(10)),
            reason="Customer confirmed by phone",
            expected_version=case.version,
        )

    assert "at version 2 since it was read at version 1" in str(refused.value)
    assert Proposal.objects.count() == proposals
    assert reload(case).version == case.version


def test_a_rejected_proposal_goes_to_an_approver_again_unchanged_only_with_a_reason(
    proposal, approver, agent
):
    """Prepared again exactly as rejected (the same change on the same order evidence), the
    same question reached an approver with nothing new; now the person says what changed, and
    the approver reads it as the proposal's note. Another change needs no reason."""
    case = reload(proposal.case)
    decision = services.proposal_reject(
        proposal=proposal, actor=approver, reason="Ask the customer first"
    )
    rejected = reload(case)

    def again(reason: str, change=proposal.change):
        return services.proposal_prepare_by_hand(
            case=reload(case),
            actor=agent,
            change=change,
            reason=reason,
            expected_version=reload(case).version,
        )

    with pytest.raises(InvalidCaseInput) as refused:
        again("")
    assert f"({decision.reference}: Ask the customer first)" in refused.value.detail
    assert refused.value.fields == {"reason": ["Say what changed since the rejection."]}
    assert reload(case).version == rejected.version  # nothing was written
    assert reload(case).status == Status.PROPOSAL_REJECTED

    second = again("The customer confirmed the date by phone")
    assert second.content_hash == proposal.content_hash
    assert second.advisory_note == (
        f"Submitted again after rejection {decision.reference}: "
        "The customer confirmed the date by phone"
    )
    assert second.status == Proposal.Status.AWAITING_REVIEW


def test_another_change_after_a_rejection_needs_no_reason(proposal, approver, agent):
    case = reload(proposal.case)
    services.proposal_reject(proposal=proposal, actor=approver, reason="Wrong date")
    other = date_change(in_days(20))
    second = services.proposal_prepare(case=reload(case), actor=agent, change=other)
    assert second.status == Proposal.Status.AWAITING_REVIEW
    assert second.advisory_note == ""
