"""Each order-system error ends an apply attempt one way, decided by its class once.

The stored outcome codes (the events' ``detail["outcome"]`` and ``detail["error"]``) and the
attempt states are part of the records: they must not drift when the dispatch is reworked.
"""

from __future__ import annotations

import pytest

from cases.models import Attempt
from reconciliation.apply import (
    EndedApprovalExpired,
    EndedEffectUnknown,
    EndedFenced,
    EndedNeedsAttention,
    EndedSourceChanged,
    EndedTransient,
    ending_for,
)
from reconciliation.exceptions import (
    ApprovalRefused,
    Conflict,
    CredentialRefused,
    EffectUnknown,
    InvalidInput,
    KeyReused,
    OrderSystemError,
    PermissionRevoked,
    ProtocolViolation,
    Transient,
    UnknownOperation,
    UnknownOrder,
)

FAILED, FENCED, UNKNOWN = (
    Attempt.State.FAILED,
    Attempt.State.FENCED,
    Attempt.State.EFFECT_UNKNOWN,
)


@pytest.mark.parametrize(
    ("exc", "kind", "code", "state"),
    [
        (EffectUnknown(detail="read timed out"), EndedEffectUnknown, "effect_unknown", UNKNOWN),
        (Transient(detail="503"), EndedTransient, "transient", FAILED),
        (Conflict("version_conflict"), EndedSourceChanged, "source_changed", FAILED),
        (Conflict("stale_fencing_token"), EndedFenced, "fenced", FENCED),
        (ApprovalRefused("approval_expired"), EndedApprovalExpired, "approval_expired", FAILED),
    ],
)
def test_each_error_class_ends_the_attempt_with_its_stored_outcome(exc, kind, code, state):
    ending = ending_for(exc)

    assert type(ending) is kind
    assert (ending.code, ending.error, ending.attempt_state) == (code, code, state)
    raw = f"{exc.error}: {exc.detail}".strip(": ")
    if kind is EndedEffectUnknown:  # the page's words, then the order system's own
        assert ending.text == (
            f"the change was sent and the order system gave no answer that proves the outcome "
            f"({raw})"
        )
    else:
        assert ending.text == raw


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (Conflict("slot_unavailable"), "slot_unavailable"),
        (ApprovalRefused("approval_invalid"), "approval_invalid"),
        (PermissionRevoked(), "permission_revoked"),
        (InvalidInput(), "invalid_field"),
        (KeyReused(), "key_reused"),
        (UnknownOrder(), "unknown_order"),
        (UnknownOperation(), "unknown_operation"),
        (ProtocolViolation(), "protocol_violation"),
        (CredentialRefused(), "unauthorized"),
        (OrderSystemError(), "order_system_error"),
    ],
)
def test_every_other_error_is_a_definite_refusal_that_needs_a_person(exc, error):
    """Repeating it would change nothing: escalated, with the receiver's own code as the
    stored error."""
    ending = ending_for(exc)

    assert type(ending) is EndedNeedsAttention
    assert (ending.code, ending.error, ending.attempt_state) == ("needs_attention", error, FAILED)


def test_a_transient_error_carries_the_receivers_retry_after():
    assert ending_for(Transient(detail="busy", retry_after=7.5)) == EndedTransient(
        "unavailable: busy", retry_after=7.5
    )
    assert ending_for(Transient()).retry_after is None
