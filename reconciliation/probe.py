"""The capability probe: verify by live requests what a connected order system really refuses.

``order_system_probe`` runs against a sandbox order the operator names. It makes one real change
to that order (a move to a date with a free slot), then sends requests that a safe receiver must
refuse: a replay, a reused key with another change, an older fencing token after a fence, a stale
expected version, an expired, a tampered and a mismatched approval grant; and it looks the applied
operation up by key. Each capability is recorded as verified only when the receiver answered
exactly as the contract says; anything else (another answer, a timeout, a network error, a claim
in ``/capabilities`` without the behaviour) is "not verified", with the evidence.

All HTTP happens before the single database write at the end (the profile row); fencing tokens
come from Holdfast's global sequence, so probe tokens never undercut a real attempt's.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from django.utils import timezone

from approvals.grants import grant_issue
from reconciliation.client import (
    FenceResult,
    OperationRecord,
    OperationResult,
    Order,
    OrderSystemClient,
    Slot,
)
from reconciliation.exceptions import (
    ApprovalRefused,
    Conflict,
    KeyReused,
    OrderSystemError,
    UnknownOperation,
)
from reconciliation.models import CAPABILITIES, OrderSystemProfile

logger = logging.getLogger(__name__)

SLOT_SEARCH_DAYS = 14
GRANT_LIFETIME = dt.timedelta(minutes=15)


class ProbeRefused(ValueError):
    """The named order is not a reserved sandbox order: probing would change a real order."""


def probe_check_sandbox(order_id: str) -> None:
    """The probe really changes the order it is given, so only reserved sandbox orders
    (``settings.ORDER_SYSTEM_SANDBOX_ORDERS``) may be probed.

    Intake refuses cases on these orders (``case_intake``), so no case can claim one; a case
    found on one anyway (opened before they were reserved) does not block the probe, or anyone
    could switch the safety check off by opening a case on the sandbox order."""
    from django.conf import settings

    order_id = order_id.strip()
    allowed = settings.ORDER_SYSTEM_SANDBOX_ORDERS
    if order_id not in allowed:
        raise ProbeRefused(
            f"{order_id!r} is not a reserved sandbox order ({', '.join(allowed) or 'none'}): "
            "the probe changes the order it is given."
        )


def order_system_probe(
    *,
    sandbox_order_id: str,
    actor=None,
    client: OrderSystemClient | None = None,
) -> OrderSystemProfile:
    """Probe the order system (``client``, default: the configured one) and save its profile.

    Never raises for what the order system does: unreachable, refusing or misbehaving systems
    get a profile with the capabilities not verified and the evidence of why. Must not be called
    inside a transaction (it makes HTTP requests); it writes one row at the end.
    """
    probe_check_sandbox(sandbox_order_id)
    own_client = client is None
    if client is None:
        client = OrderSystemClient.from_settings()
    try:
        run = _ProbeRun(client, sandbox_order_id.strip())
        run.run()
    finally:
        if own_client:
            client.close()

    user = actor if getattr(actor, "is_authenticated", False) else None
    profile = OrderSystemProfile(
        base_url=client.base_url,
        sandbox_order_id=sandbox_order_id.strip(),
        reachable=run.answered,
        claimed=run.claimed,
        evidence=run.evidence(),
        probed_at=timezone.now(),
        probed_by=user,
        probed_by_name=user.get_username() if user else "command line",
    )
    for name in CAPABILITIES:
        setattr(profile, name, run.checks[name]["verified"])
    profile.derive_autonomy()
    profile.save()
    logger.info(
        "order system %s probed: %s (%s)", profile.base_url, profile.autonomy, profile.reason
    )
    return profile


def _status_of(result: Any) -> int:
    if isinstance(result, OperationResult):
        return 200 if result.replayed else 201
    return 200


class _ProbeRun:
    def __init__(self, client: OrderSystemClient, order_id: str):
        self.client = client
        self.order_id = order_id
        self.prefix = f"PROBE-{uuid.uuid4().hex[:8]}"
        self._keys = 0
        self.answered = False
        self.claimed: dict[str, Any] = {}
        # Two free dates: the probe's change goes to the first; refused requests use either.
        self.dates: tuple[dt.date, dt.date]
        self.setup: list[dict[str, Any]] = []
        self.checks: dict[str, dict[str, Any]] = {
            name: {"verified": False, "summary": "Not run.", "steps": []} for name in CAPABILITIES
        }

    # --- plumbing --------------------------------------------------------------------------

    def evidence(self) -> dict[str, Any]:
        return {"operation_key_prefix": self.prefix, "setup": self.setup, **self.checks}

    def key(self) -> str:
        self._keys += 1
        return f"{self.prefix}-{self._keys}"

    @staticmethod
    def token() -> int:
        from cases.fencing import next_fencing_token

        return next_fencing_token()

    def grant(self, key: str, date: dt.date, *, expires_in: dt.timedelta = GRANT_LIFETIME) -> str:
        return grant_issue(
            operation_key=key,
            order_id=self.order_id,
            delivery_date=date,
            approval_id=f"{self.prefix}-approval",
            expires_at=timezone.now() + expires_in,
        )

    def call(
        self, where: str | None, request: str, fn: Callable[[], Any]
    ) -> tuple[Any, Exception | None]:
        """Run one request; record it; return ``(result, None)`` or ``(None, error)``."""
        step: dict[str, Any] = {"request": request}
        started = time.monotonic()
        result: Any = None
        error: Exception | None = None
        try:
            result = fn()
        except OrderSystemError as exc:
            error = exc
            step.update(
                status=exc.status, error=exc.error, detail=exc.detail, raised=type(exc).__name__
            )
            if exc.status is not None:
                self.answered = True
        except Exception as exc:  # a probe records a failure; it never crashes half-way
            logger.exception("probe step %r failed", request)
            error = exc
            step.update(status=None, error="probe_error", detail=f"{type(exc).__name__}: {exc}")
        else:
            self.answered = True
            step.update(status=_status_of(result), error=None)
            if isinstance(result, OperationResult | FenceResult | Order | OperationRecord):
                step["answer"] = _summary(result)
        step["ms"] = round((time.monotonic() - started) * 1000, 1)
        (self.checks[where]["steps"] if where else self.setup).append(step)
        return result, error

    def verdict(self, name: str, verified: bool, summary: str) -> None:
        self.checks[name]["verified"] = verified
        self.checks[name]["summary"] = summary

    def skip(self, names: list[str], summary: str) -> None:
        for name in names:
            if self.checks[name]["summary"] == "Not run.":
                self.verdict(name, False, summary)

    def read_order(self, where: str | None) -> Order | None:
        order, _ = self.call(
            where, f"GET /orders/{self.order_id}", lambda: self.client.get_order(self.order_id)
        )
        return order

    def apply(self, where: str, note: str, **kwargs):
        request = (
            f"POST /orders/{self.order_id}/operations key={kwargs['operation_key']} "
            f"date={kwargs['delivery_date']} expected_version={kwargs['expected_version']} "
            f"token={kwargs['fencing_token']} grant={note}"
        )
        return self.call(
            where, request, lambda: self.client.apply_operation(self.order_id, **kwargs)
        )

    # --- the probe -------------------------------------------------------------------------

    def run(self) -> None:
        claimed, _ = self.call(None, "GET /capabilities", self.client.capabilities)
        self.claimed = claimed if isinstance(claimed, dict) else {}
        order = self.read_order(None)
        if order is None:
            self.skip(list(CAPABILITIES), "The sandbox order could not be read; nothing probed.")
            return
        dates = self.free_dates(order)
        if not dates:
            self.skip(
                list(CAPABILITIES),
                f"No free delivery slot in the next {SLOT_SEARCH_DAYS} days; nothing probed.",
            )
            return
        # A second date for the other checks: another free one, else the order's original date,
        # whose slot the first change releases.
        self.dates = (dates[0], dates[1] if len(dates) > 1 else order.delivery_date)

        first, low_token = self.probe_apply_and_replay(order)
        self.probe_key_reuse(first)
        self.probe_fencing(low_token)
        self.probe_version_check()
        self.probe_approval_checks()
        self.probe_consistent_lookup(first)

    def free_dates(self, order: Order) -> list[dt.date]:
        today = timezone.localdate()
        found: list[dt.date] = []
        for offset in range(1, SLOT_SEARCH_DAYS + 1):
            date = today + dt.timedelta(days=offset)
            if date == order.delivery_date:
                continue
            slot, _ = self.call(None, f"GET /slots/{date}", partial(self.client.get_slot, date))
            if isinstance(slot, Slot) and slot.free > 0:
                found.append(date)
                if len(found) == 2:
                    break
        return found

    def another_date(self, order: Order | None) -> dt.date:
        """A date with a free slot that differs from the order's current one."""
        first, second = self.dates
        if order is not None and order.delivery_date == first:
            return second
        return first

    def probe_apply_and_replay(self, order: Order) -> tuple[OperationResult | None, int]:
        name = "idempotent_replay"
        key, date, token = self.key(), self.dates[0], self.token()
        request = {
            "operation_key": key,
            "delivery_date": date,
            "expected_version": order.version,
            "fencing_token": token,
            "approval_grant": self.grant(key, date),
        }
        first, error = self.apply(name, "valid", **request)
        if not isinstance(first, OperationResult) or first.replayed:
            self.verdict(name, False, f"The probe's own change was not applied: {_why(error)}.")
            return None, token
        again, error = self.apply(name, "valid (the same request again)", **request)
        after = self.read_order(name)
        if again is None:
            self.verdict(name, False, f"The repeat got no replay: {_why(error)}.")
        elif not again.replayed:
            self.verdict(name, False, "Repeating the request was answered as a new application.")
        elif again.order_version != first.order_version:
            self.verdict(name, False, "The repeat answered another order version than the first.")
        elif after is None or after.version != first.order_version:
            self.verdict(name, False, "The order's version moved after the repeat.")
        else:
            self.verdict(name, True, "The repeat returned the first result; nothing changed.")
        return first, token

    def probe_key_reuse(self, first: OperationResult | None) -> None:
        name = "key_reuse_refused"
        if first is None:
            self.verdict(name, False, "No operation was applied whose key could be reused.")
            return
        current = self.read_order(name)
        if current is None:
            self.verdict(name, False, "The order could not be read.")
            return
        key, date = first.operation_key, self.another_date(current)
        result, error = self.apply(
            name,
            "valid, for the other change",
            operation_key=key,
            delivery_date=date,
            expected_version=current.version,
            fencing_token=self.token(),
            approval_grant=self.grant(key, date),
        )
        self.expect(name, result, error, KeyReused, "key_reused")

    def probe_fencing(self, low_token: int) -> None:
        name = "fencing_enforced"
        current = self.read_order(name)
        if current is None:
            self.verdict(name, False, "The order could not be read.")
            return
        high = self.token()
        fenced, error = self.call(
            name,
            f"POST /orders/{self.order_id}/fence token={high}",
            lambda: self.client.fence(self.order_id, high),
        )
        if not isinstance(fenced, FenceResult):
            self.verdict(name, False, f"The fence was not raised: {_why(error)}.")
            return
        if fenced.min_token < high:
            self.verdict(name, False, f"The fence answered min_token {fenced.min_token} < {high}.")
            return
        key, date = self.key(), self.another_date(current)
        result, error = self.apply(
            name,
            "valid",
            operation_key=key,
            delivery_date=date,
            expected_version=current.version,
            fencing_token=low_token,
            approval_grant=self.grant(key, date),
        )
        self.expect(name, result, error, Conflict, "stale_fencing_token")

    def probe_version_check(self) -> None:
        name = "version_check"
        current = self.read_order(name)
        if current is None:
            self.verdict(name, False, "The order could not be read.")
            return
        wrong = current.version - 1 if current.version > 0 else current.version + 1
        key, date = self.key(), self.another_date(current)
        result, error = self.apply(
            name,
            "valid",
            operation_key=key,
            delivery_date=date,
            expected_version=wrong,
            fencing_token=self.token(),
            approval_grant=self.grant(key, date),
        )
        self.expect(name, result, error, Conflict, "version_conflict")

    def probe_approval_checks(self) -> None:
        name = "approval_expiry_enforced"
        cases = (
            ("expired but correctly signed", "approval_expired"),
            ("tampered (signature of another change)", "approval_invalid"),
            ("correctly signed for another change", "approval_invalid"),
        )
        failures = []
        for note, expected in cases:
            current = self.read_order(name)
            if current is None:
                failures.append(f"{note}: the order could not be read")
                continue
            key, date = self.key(), self.another_date(current)
            other = self.dates[1] if date == self.dates[0] else self.dates[0]
            if expected == "approval_expired":
                grant = self.grant(key, date, expires_in=-dt.timedelta(hours=1))
            elif note.startswith("tampered"):
                payload = self.grant(key, date).split(".")[1]
                signature = self.grant(key, other).split(".")[2]
                grant = f"v1.{payload}.{signature}"
            else:
                grant = self.grant(key, other)
            result, error = self.apply(
                name,
                note,
                operation_key=key,
                delivery_date=date,
                expected_version=current.version,
                fencing_token=self.token(),
                approval_grant=grant,
            )
            if not (isinstance(error, ApprovalRefused) and error.kind == expected):
                failures.append(f"{note}: expected {expected}, got {_outcome(result, error)}")
        if failures:
            self.verdict(name, False, "; ".join(failures) + ".")
        else:
            self.verdict(
                name, True, "Expired, tampered and mismatched grants were refused as expected."
            )

    def probe_consistent_lookup(self, first: OperationResult | None) -> None:
        name = "consistent_lookup"
        if first is None:
            self.verdict(name, False, "No operation was applied that could be looked up.")
            return
        key = first.operation_key
        record, error = self.call(
            name, f"GET /operations/{key}", lambda: self.client.get_operation(key)
        )
        never = f"{self.prefix}-never-sent"
        _, absent = self.call(
            name, f"GET /operations/{never}", lambda: self.client.get_operation(never)
        )
        # Evidence only: the lagging search proves nothing either way.
        self.call(
            name, f"GET /search/operations?key={key}", lambda: self.client.search_operation(key)
        )
        if not isinstance(record, OperationRecord):
            self.verdict(name, False, f"The applied operation was not found: {_why(error)}.")
        elif (
            record.operation_key != key
            or record.order_id != self.order_id
            or record.delivery_date != self.dates[0]
            or record.status != "applied"
            or record.order_version != first.order_version
        ):
            self.verdict(name, False, f"The lookup answered another result: {_summary(record)}.")
        elif not isinstance(absent, UnknownOperation):
            self.verdict(
                name, False, f"A never-sent key was answered {_why(absent)}, not unknown_operation."
            )
        else:
            self.verdict(
                name, True, "The applied operation was found with its result; an unknown key 404s."
            )

    def expect(
        self,
        name: str,
        result: object,
        error: Exception | None,
        error_class: type[OrderSystemError],
        code: str,
    ) -> None:
        if isinstance(error, error_class) and error.error == code:
            self.verdict(name, True, f"Refused with {error.status} {code}, as required.")
        else:
            self.verdict(name, False, f"Expected {code}, got {_outcome(result, error)}.")


def _summary(result: Any) -> dict[str, Any]:
    return {
        field: (value.isoformat() if isinstance(value, dt.date) else value)
        for field, value in ((f, getattr(result, f)) for f in result.__slots__)
    }


def _why(error: BaseException | None) -> str:
    if error is None:
        return "no error, but no usable answer"
    if isinstance(error, OrderSystemError):
        status = f"HTTP {error.status} " if error.status else ""
        return f"{status}{error.error}" + (f" ({error.detail})" if error.detail else "")
    return f"{type(error).__name__}: {error}"


def _outcome(result: Any, error: BaseException | None) -> str:
    if isinstance(result, OperationResult):
        verb = "a replay" if result.replayed else "APPLIED"
        return f"{verb} (order version {result.order_version})"
    return _why(error)
