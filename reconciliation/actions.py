"""The case actions that need approvals or the order system, registered on the kernel's list.

See ``cases.actions``: each action checks, then calls one service. Registered from
``ReconciliationConfig.ready``.
"""

from __future__ import annotations

from django_fsm import can_proceed

from cases import kinds
from cases.actions import CaseAction, register
from cases.kernel import check_version
from cases.models import Case, Status


def _reconcile(*, case: Case, actor, expected_version: int, reason: str) -> str:
    from reconciliation.settle import case_reconcile

    outcome = case_reconcile(case_id=case.pk, actor=actor)
    return f"{case.reference}: reconciliation — {outcome}."


def _supervised(case: Case) -> bool:
    from reconciliation.selectors import current_autonomy

    return (
        case.status == Status.READY
        and case.apply_authorized_by_id is None
        and not current_autonomy(kind=case.kind).is_autonomous
    )


def _authorize(*, case: Case, actor, expected_version: int, reason: str) -> str:
    from reconciliation.claims import case_authorize_apply

    case_authorize_apply(case=case, actor=actor, expected_version=expected_version)
    return f"{case.reference}: apply started; a worker claims it now."


def _reversal_available(case: Case) -> bool:
    """Done, a cancellation arrived after the change, and its kind can put back what the
    source check saw before it (an irreversible kind never can)."""
    return (
        case.status == Status.DONE
        and case.account.access_active
        and _reversal_of(case) is not None
        and case.has_late_cancellation()
    )


def _reversal_of(case: Case) -> dict | None:
    try:
        return case.change_kind.reversal(case.order_seen)
    except kinds.UnknownKind:
        return None


def _reversal(*, case: Case, actor, expected_version: int, reason: str) -> str:
    from reconciliation.settle import case_propose_reversal

    proposal = case_propose_reversal(case=case, actor=actor, expected_version=expected_version)
    return (
        f"{case.reference}: reversal proposed (proposal #{proposal.pk}: "
        f"{proposal.description}); it needs its own approval."
    )


def _withdraw_available(case: Case) -> bool:
    # With work in flight a plain stop is refused; withdrawing revokes authority and settles
    # what is running.
    return not case.is_terminal and case.revoked_at is None and not can_proceed(case.stop)


def _withdraw(*, case: Case, actor, expected_version: int, reason: str) -> str:
    from reconciliation.revocation import case_revoke, describe_revocation

    check_version(Case.objects.get(pk=case.pk), expected_version)
    result = case_revoke(case=case, actor=actor, kind="withdrawn", reason=reason)
    return describe_revocation(result)


def customer_not_told(case: Case) -> bool:
    """The change is confirmed but no notification step ever ran (e.g. it landed after a
    withdrawal, when no further steps run)."""
    from approvals.models import Operation

    return (
        case.status == Status.DONE
        and Operation.objects.filter(
            case=case, confirmed_at__isnull=False, notified_at__isnull=True
        ).exists()
    )


def _customer_told(*, case: Case, actor, expected_version: int, reason: str) -> str:
    from reconciliation.settle import case_record_customer_told

    case_record_customer_told(
        case=case, actor=actor, expected_version=expected_version, reason=reason
    )
    return f"{case.reference}: recorded that the customer was told."


register(
    CaseAction(
        name="reconcile",
        label="Reconcile now (fence, then look)",
        words="reconcile now: fence the order, then read the operation by key",
        permission="cases.lead_case",
        available=lambda case: case.status == Status.HELD,
        execute=_reconcile,
        needs_reason=False,
        order=1,
    )
)
register(
    CaseAction(
        name="settle",
        label="Record the settlement from evidence",
        words="record the settlement from the order system's evidence",
        permission="cases.lead_case",
        available=lambda case: case.status == Status.HELD,
        form="settle",
        order=2,
    )
)
register(
    CaseAction(
        name="authorize",
        label="Start the apply (supervised)",
        words="start the apply (the order system is not autonomous)",
        permission="cases.lead_case",
        available=_supervised,
        execute=_authorize,
        needs_reason=False,
        order=5,
    )
)
register(
    CaseAction(
        name="reversal",
        label="Propose reversal (new proposal, new approval)",
        words="propose a reversal (a new proposal that needs its own approval)",
        permission="cases.work_case",
        available=_reversal_available,
        execute=_reversal,
        needs_reason=False,
        confirm=lambda case: (
            f"A new proposal puts {case.order_id} back as it was "
            f"({kinds.describe(_reversal_of(case) or {})}); it gets its own operation key and "
            "needs its own approval."
        ),
        confirm_label="Propose the reversal",
        order=6,
    )
)
register(
    CaseAction(
        name="customer_told",
        label="Record that the customer was told",
        words="tell the customer the change is applied, then record it",
        permission="cases.work_case",
        available=customer_not_told,
        execute=_customer_told,
        confirm="Record how and when the customer was told that the change is applied.",
        confirm_label="Record it",
        order=7,
    )
)
register(
    CaseAction(
        name="withdraw",
        label="Withdraw (revoke authority, settle work in flight)",
        words="withdraw it (revoke authority and settle the work in flight)",
        permission="cases.lead_case",
        available=_withdraw_available,
        execute=_withdraw,
        confirm=lambda case: (
            f"Authority over {case.reference} is revoked: queued and awaiting-approval work is "
            "closed now, a running worker is asked to stop and the order system is fenced. If "
            "a change may already have been sent, the case stays held until the evidence "
            "settles it."
        ),
        confirm_label=lambda case: f"Yes, withdraw {case.reference}",
        danger=True,
        order=60,
    )
)
