"""Refusals specific to proposals and approvals (they share the case error shape)."""

from __future__ import annotations

from cases.exceptions import CaseError, InvalidCaseInput


class OwnProposal(CaseError):
    """Four eyes: the person who prepared a proposal may not decide it."""

    code = "own_proposal"
    http_status = 403


class ProposalNotCurrent(CaseError):
    """The proposal was superseded, invalidated, decided or its case moved on."""

    code = "proposal_not_current"
    http_status = 409


class ExpiryOutOfBounds(InvalidCaseInput):
    code = "invalid"


# --- Approval grants (Holdfast's own checks; the receiver verifies independently) ----------


class GrantError(Exception):
    """Base of approval-grant verification failures."""

    error = "approval_invalid"


class GrantInvalid(GrantError):
    """Malformed, wrongly signed, or not for this operation/order/change."""


class GrantExpired(GrantError):
    """Correctly signed, but its ``expires_at`` has passed."""

    error = "approval_expired"
