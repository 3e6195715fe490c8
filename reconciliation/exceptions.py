"""Classified errors from the order system, and from Holdfast's own approval-grant checks.

What a caller may do next depends only on the class:

- ``Transient``: the request was definitely not acted on (never sent, or the receiver said
  ``503 unavailable``, which the contract defines as "nothing applied"). Safe to retry later,
  with backoff, honouring ``retry_after``.
- ``EffectUnknown``: a write may or may not have been applied (sent, then no usable answer).
  Never retried blindly: the case is held and the operation is reconciled by key after a fence.
- Every other ``OrderSystemError`` is a *definite* answer from the receiver: nothing was applied
  by this request, and repeating it unchanged gives the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping


class OrderSystemError(Exception):
    """Base of every error the order-system client raises.

    ``error`` is the machine-readable code (from the receiver's body when it sent one, otherwise
    one chosen by the client, e.g. ``connect_failed``), ``detail`` the human explanation and
    ``status`` the HTTP status when a response arrived at all.
    """

    default_error = "order_system_error"

    def __init__(self, error: str | None = None, detail: str = "", *, status: int | None = None):
        self.error = error or self.default_error
        self.detail = detail
        self.status = status
        super().__init__(f"{self.error}: {detail}" if detail else self.error)


class Transient(OrderSystemError):
    """Nothing was applied; the same request may be sent again later."""

    default_error = "unavailable"

    def __init__(
        self,
        error: str | None = None,
        detail: str = "",
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(error, detail, status=status)
        self.retry_after = retry_after


class EffectUnknown(OrderSystemError):
    """A write was (or may have been) sent and no usable answer came back.

    The change may be applied. Settle it from evidence (fence, then the consistent lookup by
    operation key); do not send a new operation and do not report success or failure.
    """

    default_error = "effect_unknown"


class Conflict(OrderSystemError):
    """The receiver refused the write because its state disagrees with the request.

    ``kind`` is one of ``CONFLICT_KINDS``.
    """

    default_error = "conflict"

    def __init__(self, kind: str, detail: str = "", *, status: int | None = 409):
        super().__init__(kind, detail, status=status)
        self.kind = kind


# The receiving contract's own conflicts; a change kind adds its own (``cases.kinds``: a kind's
# ``refusals``, and every kind's ``order_not_open``).
CONFLICT_KINDS = frozenset({"version_conflict", "stale_fencing_token"})


class ApprovalRefused(OrderSystemError):
    """The receiver refused the approval grant (``approval_invalid`` or ``approval_expired``)."""

    default_error = "approval_invalid"

    def __init__(self, kind: str, detail: str = "", *, status: int | None = 403):
        super().__init__(kind, detail, status=status)
        self.kind = kind


APPROVAL_REFUSAL_KINDS = frozenset({"approval_invalid", "approval_expired"})


class PermissionRevoked(OrderSystemError):
    """The account no longer has access to the order: the work needs its owner, not a retry."""

    default_error = "permission_revoked"


class InvalidInput(OrderSystemError):
    """The receiver refused a field; ``fields`` maps field names to messages."""

    default_error = "invalid_field"

    def __init__(
        self,
        error: str | None = None,
        detail: str = "",
        *,
        status: int | None = 422,
        fields: Mapping[str, list[str]] | None = None,
    ):
        super().__init__(error, detail, status=status)
        self.fields: dict[str, list[str]] = dict(fields or {})


class KeyReused(OrderSystemError):
    """The operation key was already used with a different body: a bug, never a retry."""

    default_error = "key_reused"


class UnknownOrder(OrderSystemError):
    """The order does not exist at the receiver (a definite ``404 unknown_order``)."""

    default_error = "unknown_order"


class UnknownOperation(OrderSystemError):
    """The consistent lookup answered ``404 unknown_operation``.

    A definite answer *at the time of the read*. It proves "no effect" only once the order was
    fenced above every attempt's token before the lookup (CONTRACT §1).
    """

    default_error = "unknown_operation"


class CredentialRefused(OrderSystemError):
    """The order system refused Holdfast's credential (``401 unauthorized``): it checks the
    credential before anything else, so nothing was applied, and every call fails the same way
    until a person sets the right ``ORDER_SYSTEM_TOKEN``. A bare 401 without that code (from
    something in front of the order system) is not this: for a write it stays
    ``EffectUnknown``."""

    default_error = "unauthorized"


class ProtocolViolation(OrderSystemError):
    """A read got an answer that does not follow the contract (unparseable body, unexpected
    status or error code). Writes never raise this: for them such an answer is ``EffectUnknown``.
    """

    default_error = "protocol_violation"


# What a failed call means, in words for the pages (keyed by the client's error code).
# Not the receiver's code: the client's, for a read of an order older than a version the case
# already knows (``reconciliation.sources``).
OLDER_VERSION = "older_version"

PLAIN_FAILURE = {
    "connect_failed": "could not be reached",
    "no_answer": "did not answer",
    "effect_unknown": "gave no answer that proves the outcome",
    "unavailable": "said it was unavailable",
    "bad_gateway": "did not answer (a gateway in front of it failed)",
    "protocol_violation": "answered in a way that does not follow the contract",
    "undecodable_answer": "answered in a way that does not follow the contract",
    "unexpected_status": "answered in a way that does not follow the contract",
    "permission_revoked": "refused access to the order",
    OLDER_VERSION: "answered with an older version of the order than the case already knows",
}


def plain_failure(exc: OrderSystemError) -> str:
    """What the order system did, in words: 'did not answer' (a timeout, a dropped
    connection) is told apart from 'said it was unavailable' (it answered, and refused)."""
    return PLAIN_FAILURE.get(exc.error, f"refused the request ({exc.error})")
