"""The one registry of audit action codes: every ``CaseEvent.action`` any app writes.

Invariants:

- *One list.* Every code passed to ``record_event`` / ``record_fact`` (in ``cases``,
  ``approvals`` and ``reconciliation``, the lab's drills and simulation included) is a member
  here; the writer converts with ``Action(action)``, so an unregistered code raises
  ``ValueError`` before anything is written, and a test fails instead of the audit trail
  gaining a code the timeline cannot tell.
- *Stored values never change.* A member's value is the string already stored in the
  database (``"cases.revocation.requested"``). Renaming a member is free; changing a value
  would orphan every stored event with the old one, so it needs a data migration.
- *Kernel-owned, dependency-free.* The registry lives in the kernel even for the codes that
  ``approvals`` and ``reconciliation`` write, and imports nothing, so any layer may use it
  and the layers above add codes here rather than defining their own.

``cases.case_story.ACTION_WORDS`` gives every member its words (a test checks both ways).
Because ``Action`` is a ``StrEnum``, a member compares equal to its stored string, so
``event.action == Action.CASE_CREATED`` and ``filter(action=Action.CASE_CREATED)`` work on
rows read back from the database.
"""

from __future__ import annotations

import enum


class Action(enum.StrEnum):
    """An audit event's code: ``<app>.<subject>.<what happened>``, as stored."""

    # --- the case itself (cases) ---------------------------------------------------------
    CASE_CREATED = "cases.case.created"
    CASE_REQUEST_JOINED = "cases.case.request_joined"
    CASE_TRANSITIONED = "cases.case.transitioned"
    CASE_CLAIMED = "cases.case.claimed"
    CASE_REASSIGNED = "cases.case.reassigned"
    CASE_FOLLOWUP_UPDATED = "cases.case.followup_updated"
    # A person's follow-up time passed: the reminder (``cases.reminders``).
    FOLLOW_UP_DUE = "cases.follow_up.due"
    CASE_INTENT_CHANGED = "cases.case.intent_changed"
    CASE_RESPONSIBILITY_TO_BACKUP = "cases.case.responsibility_to_backup"
    CASE_RESPONSIBILITY_TO_OWNER = "cases.case.responsibility_to_owner"
    CASE_LEGAL_HOLD_SET = "cases.case.legal_hold_set"
    CASE_LEGAL_HOLD_LIFTED = "cases.case.legal_hold_lifted"
    CASE_PURGED = "cases.case.purged"
    EVIDENCE_RECORDED = "cases.evidence.recorded"

    # --- cancellation --------------------------------------------------------------------
    CANCELLATION_REQUESTED = "cases.cancellation.requested"
    CANCELLATION_AFTER_CHANGE = "cases.cancellation.after_change"
    CANCELLATION_REFUSED = "cases.cancellation.refused"

    # --- claims, attempts and the apply --------------------------------------------------
    CLAIM_REFUSED = "cases.claim.refused"
    APPLY_AUTHORIZED = "cases.apply.authorized"
    ATTEMPT_CANCEL_REQUESTED = "cases.attempt.cancel_requested"
    ATTEMPT_WORKER_STOPPED = "cases.attempt.worker_stopped"
    ATTEMPT_LEASE_EXPIRED = "cases.attempt.lease_expired"
    ATTEMPT_CLAIM_RELEASED = "cases.attempt.claim_released"
    # The same fact as stored before it was renamed (an attempt's claim was called its
    # "execution slot", apart from a delivery slot): read in old events, never written again.
    ATTEMPT_CLAIM_RELEASED_LEGACY = "cases.attempt.slot_released"
    ATTEMPT_LATE_RESULT_RECORDED = "cases.attempt.late_result_recorded"
    ATTEMPT_LATE_RESULT_REFUSED = "cases.attempt.late_result_refused"
    STEP_APPLIED = "cases.step.applied"
    STEP_NOTIFIED = "cases.step.notified"

    # --- the customer's notification -----------------------------------------------------
    NOTIFICATION_SENDING = "cases.notification.sending"
    NOTIFICATION_FAILED = "cases.notification.failed"
    NOTIFICATION_MAY_HAVE_GONE = "cases.notification.may_have_gone"

    # --- revocation and the customer's account -------------------------------------------
    REVOCATION_REQUESTED = "cases.revocation.requested"
    REVOCATION_UNSETTLED_DISCOVERED = "cases.revocation.unsettled_discovered"
    REVOCATION_CLOSED_QUEUED = "cases.revocation.closed_queued"
    REVOCATION_FENCED = "cases.revocation.fenced"
    REVOCATION_FENCE_FAILED = "cases.revocation.fence_failed"
    ACCOUNT_ACCESS_REVOKED = "cases.account.access_revoked"
    ACCOUNT_UPDATED = "cases.account.updated"

    # --- approvals -----------------------------------------------------------------------
    PROPOSAL_PREPARED = "approvals.proposal.prepared"
    APPROVAL_EXPIRED_DURING_HOLD = "approvals.approval.expired_during_hold"

    # --- reconciliation ------------------------------------------------------------------
    SOURCE_CHECK_FAILED = "reconciliation.source_check.failed"
    ORDER_EVENT_RECORDED = "reconciliation.order_event.recorded"
    RESTORE_UNEXPECTED_REPLAY = "reconciliation.restore.unexpected_replay"
    RESTORE_APPLIED_BEFORE_RESTORE = "reconciliation.restore.applied_before_restore"
    RESTORE_ATTEMPT_ENDED = "reconciliation.restore.attempt_ended"
    MANUAL_SETTLEMENT_NEEDED = "reconciliation.manual_settlement_needed"
    FINDING_DISCARDED = "reconciliation.finding_discarded"
    STILL_UNKNOWN = "reconciliation.still_unknown"
    # A held case whose settlement kept failing: it stays held, flagged for a person.
    RETRIES_EXHAUSTED = "reconciliation.retries_exhausted"


class AccountAction(enum.StrEnum):
    """An account event's code (``AccountEvent.action``, ``cases.account_events``), as stored.

    The account's own audit trail, beside the case events: what was done to the customer
    account itself. The same rules hold as for ``Action``: stored values never change, and the
    writer converts with ``AccountAction(action)``, so an unregistered code is refused.
    """

    CREATED = "cases.account.created"
    VERIFIED = "cases.account.verified"
    UPDATED = "cases.account.updated"
    ACCESS_REVOKED = "cases.account.access_revoked"

    @property
    def words(self) -> str:
        return ACCOUNT_ACTION_WORDS[self]


ACCOUNT_ACTION_WORDS = {
    AccountAction.CREATED: "Account created",
    AccountAction.VERIFIED: "Identity verified: its new cases start",
    AccountAction.UPDATED: "Name or email changed",
    AccountAction.ACCESS_REVOKED: "Access revoked: its open cases stopped",
}
