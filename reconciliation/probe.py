"""The capability probe: verify by live requests what a connected order system really refuses.

``order_system_probe`` runs against a sandbox order the operator names. It makes one real change
to that order (of the first reversible kind the order system lists), then sends requests that a
safe receiver must refuse: a replay, a reused key with another change, an older fencing token
after a fence, a stale expected version, an expired, a tampered and a mismatched approval grant;
and it looks the applied operation up by key. Then it proves each kind it lists on its own (a
reversible kind by a real change, its replay, its lookup and a change back; an irreversible one
by refusals only, never applied), which decides each kind's autonomy. Each capability is
recorded as verified only when the receiver answered exactly as the contract says; anything else
(another answer, a timeout, a network error, a claim in ``/capabilities`` without the behaviour)
is "not verified", with the evidence.

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

from django.template.defaultfilters import pluralize
from django.utils import timezone
from django.utils.text import get_text_list

from approvals.grants import grant_issue
from cases import kinds
from reconciliation.client import (
    FenceResult,
    OperationRecord,
    OperationResult,
    Order,
    OrderSystemClient,
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

GRANT_LIFETIME = dt.timedelta(minutes=15)


class ProbeRefused(ValueError):
    """The named order is not a reserved sandbox order: probing would change a real order."""


def probe_changes_words() -> str:
    """What a probe run does to the sandbox order, in words, from the kinds it probes: a change
    and a change back for each kind that can be undone (the generic checks' change is the first
    kind's), and no change at all of a kind that cannot."""
    undoable = [kind.label.lower() for kind in kinds.kinds() if not kind.irreversible]
    final = [kind.label for kind in kinds.kinds() if kind.irreversible]
    count = len(undoable)
    words = (
        f"{count} change{pluralize(count)} and {count} change{pluralize(count)} back, one of "
        f"each for {get_text_list(undoable, 'and')}, so the order ends as it began."
        if undoable
        else "none."
    )
    if final:
        them = "it" if len(final) == 1 else "them"
        words += (
            f" {get_text_list(final, 'and')} cannot be undone: the probe only sends {them} "
            f"requests that must be refused, and never applies {them}."
        )
    return words


def probe_check_sandbox(order_id: str) -> None:
    """The probe really changes the order it is given, so only reserved sandbox orders
    (``settings.ORDER_SYSTEM_SANDBOX_ORDERS``) may be probed.

    Intake refuses cases on these orders (``case_open``), so no case can claim one; a case
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
    profile.derive_autonomy({code: check["verified"] for code, check in run.kinds.items()})
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
        # The generic checks send changes of one kind the order system lists: two different
        # ones, the first applied (``probe_changes``); refused requests use either.
        self.changes: tuple[dict[str, Any], dict[str, Any]]
        self.first_applied = False
        self.setup: list[dict[str, Any]] = []
        self.checks: dict[str, dict[str, Any]] = {
            name: {"verified": False, "summary": "Not run.", "steps": []} for name in CAPABILITIES
        }
        # Per change kind this desk offers: listed by the order system, verified, and why.
        self.kinds: dict[str, dict[str, Any]] = {
            kind.code: {"listed": False, "verified": False, "summary": "Not run.", "steps": []}
            for kind in kinds.kinds()
        }

    # --- plumbing --------------------------------------------------------------------------

    def evidence(self) -> dict[str, Any]:
        return {
            "operation_key_prefix": self.prefix,
            "setup": self.setup,
            **self.checks,
            "kinds": self.kinds,
        }

    def key(self) -> str:
        self._keys += 1
        return f"{self.prefix}-{self._keys}"

    @staticmethod
    def token() -> int:
        from cases.fencing import next_fencing_token

        return next_fencing_token()

    def grant(
        self,
        key: str,
        change: dict[str, Any],
        *,
        expires_in: dt.timedelta = GRANT_LIFETIME,
    ) -> str:
        return grant_issue(
            operation_key=key,
            order_id=self.order_id,
            change=change,
            approval_id=f"{self.prefix}-approval",
            expires_at=timezone.now() + expires_in,
        )

    def steps_of(self, where: str | None) -> list[dict[str, Any]]:
        if where is None:
            return self.setup
        if where in self.checks:
            return self.checks[where]["steps"]
        return self.kinds[where]["steps"]

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
        self.steps_of(where).append(step)
        return result, error

    def verdict(self, name: str, verified: bool, summary: str) -> None:
        check = self.checks[name] if name in self.checks else self.kinds[name]
        check["verified"] = verified
        check["summary"] = summary

    def skip(self, names: list[str], summary: str) -> None:
        for name in names:
            if self.checks[name]["summary"] == "Not run.":
                self.verdict(name, False, summary)

    def read_order(self, where: str | None) -> Order | None:
        order, _ = self.call(
            where, f"GET /orders/{self.order_id}", lambda: self.client.get_order(self.order_id)
        )
        return order

    def send(
        self,
        where: str,
        note: str,
        change: dict[str, Any],
        *,
        version: int,
        key: str | None = None,
        token: int | None = None,
        grant: str | None = None,
    ) -> tuple[Any, Exception | None]:
        """``POST /orders/{id}/operations``: ``change`` under ``key`` (a new one by default)
        with ``token`` (a fresh one) and ``grant`` (valid for it), expecting ``version``."""
        key = key or self.key()
        token = self.token() if token is None else token
        grant = grant or self.grant(key, change)
        request = (
            f"POST /orders/{self.order_id}/operations key={key} "
            f"change={kinds.canonical_json(change)} expected_version={version} "
            f"token={token} grant={note}"
        )
        return self.call(
            where,
            request,
            lambda: self.client.apply_operation(
                self.order_id,
                operation_key=key,
                change=change,
                expected_version=version,
                fencing_token=token,
                approval_grant=grant,
            ),
        )

    def changes_of(self, kind: kinds.ChangeKind, where: str | None, order: Order) -> Any:
        """``kind``'s probe changes for ``order`` (recorded as a step), or None."""
        changes, _ = self.call(
            where,
            f"probe changes of {kind.code} for {self.order_id}",
            partial(kind.probe_changes, self.client, order),
        )
        return changes if isinstance(changes, list) else None

    # --- the probe -------------------------------------------------------------------------

    def run(self) -> None:
        claimed, _ = self.call(None, "GET /capabilities", self.client.capabilities)
        self.claimed = claimed if isinstance(claimed, dict) else {}
        listed = self.claimed.get("change_kinds")
        listed = (
            [code for code in listed if isinstance(code, str)] if isinstance(listed, list) else []
        )
        for code, check in self.kinds.items():
            check["listed"] = code in listed
        order = self.read_order(None)
        if order is None:
            self.skip(list(CAPABILITIES), "The sandbox order could not be read; nothing probed.")
            self.skip_kinds("The sandbox order could not be read; nothing probed.")
            return
        generic = self.generic_kind(order)
        if generic is None:
            self.skip(
                list(CAPABILITIES),
                "No reversible kind of change the order system lists could be sent to the "
                "sandbox order now; nothing probed.",
            )
        else:
            first, low_token = self.probe_apply_and_replay(order)
            self.probe_key_reuse(first)
            self.probe_fencing(low_token)
            self.probe_version_check()
            self.probe_approval_checks()
            self.probe_consistent_lookup(first)
        for kind in kinds.kinds():
            if not self.kinds[kind.code]["listed"]:
                self.verdict(
                    kind.code,
                    False,
                    f"The order system does not list {kind.code} in change_kinds: review only.",
                )
            elif kind.irreversible:
                self.probe_kind_by_refusals(kind)
            else:
                self.probe_kind_reversible(kind, generic=kind is generic, original=order)

    def skip_kinds(self, summary: str) -> None:
        for code in self.kinds:
            if self.kinds[code]["summary"] == "Not run.":
                self.verdict(code, False, summary)

    def generic_kind(self, order: Order) -> kinds.ChangeKind | None:
        """The first reversible kind the order system lists that has two changes to send the
        sandbox order now: the generic checks use it."""
        for kind in kinds.kinds():
            if kind.irreversible or not self.kinds[kind.code]["listed"]:
                continue
            changes = self.changes_of(kind, None, order)
            if changes and len(changes) >= 2:
                self.changes = (changes[0], changes[1])
                return kind
        return None

    def another_change(self) -> dict[str, Any]:
        """A change other than the one the order holds now."""
        first, second = self.changes
        return second if self.first_applied else first

    def apply_twice(
        self, where: str, change: dict[str, Any], order: Order
    ) -> tuple[OperationResult | None, OperationResult | None, Exception | None, int]:
        """``change`` applied, then the same request again: (the first answer, or None when
        it was not a new application; the second answer; the last error; the token)."""
        key, token = self.key(), self.token()
        grant = self.grant(key, change)
        send = partial(self.send, version=order.version, key=key, token=token, grant=grant)
        first, error = send(where, "valid", change)
        if not isinstance(first, OperationResult) or first.replayed:
            return None, None, error, token
        again, error = send(where, "valid (the same request again)", change)
        return first, again, error, token

    def probe_apply_and_replay(self, order: Order) -> tuple[OperationResult | None, int]:
        name = "idempotent_replay"
        first, again, error, token = self.apply_twice(name, self.changes[0], order)
        if first is None:
            self.verdict(name, False, f"The probe's own change was not applied: {_why(error)}.")
            return None, token
        self.first_applied = True
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
        result, error = self.send(
            name,
            "valid, for the other change",
            self.another_change(),
            version=current.version,
            key=first.operation_key,
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
        result, error = self.send(
            name, "valid", self.another_change(), version=current.version, token=low_token
        )
        self.expect(name, result, error, Conflict, "stale_fencing_token")

    def probe_version_check(self) -> None:
        name = "version_check"
        current = self.read_order(name)
        if current is None:
            self.verdict(name, False, "The order could not be read.")
            return
        result, error = self.send(
            name, "valid", self.another_change(), version=_stale(current.version)
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
            key, change = self.key(), self.another_change()
            other = self.changes[1] if change is self.changes[0] else self.changes[0]
            if expected == "approval_expired":
                grant = self.grant(key, change, expires_in=-dt.timedelta(hours=1))
            elif note.startswith("tampered"):
                payload = self.grant(key, change).split(".")[1]
                signature = self.grant(key, other).split(".")[2]
                grant = f"v1.{payload}.{signature}"
            else:
                grant = self.grant(key, other)
            result, error = self.send(
                name, note, change, version=current.version, key=key, grant=grant
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
        elif not _found(record, key, self.order_id, self.changes[0], first):
            self.verdict(name, False, f"The lookup answered another result: {_summary(record)}.")
        elif not isinstance(absent, UnknownOperation):
            self.verdict(
                name, False, f"A never-sent key was answered {_why(absent)}, not unknown_operation."
            )
        else:
            self.verdict(
                name, True, "The applied operation was found with its result; an unknown key 404s."
            )

    # --- per change kind ------------------------------------------------------------------

    def probe_kind_reversible(
        self, kind: kinds.ChangeKind, *, generic: bool, original: Order
    ) -> None:
        """A real change of ``kind`` to the sandbox order: applied, replayed, found by the
        consistent lookup with the whole change, then changed back to what the order held
        before (``reversal``). The generic checks' change stands for the first three when
        ``kind`` is theirs; the order is still put back."""
        where = kind.code
        before = self.read_order(where)
        if before is None:
            self.verdict(where, False, "The order could not be read.")
            return
        seen = kind.seen(original if generic else before)
        if generic:
            unproven = [
                name
                for name in ("idempotent_replay", "consistent_lookup")
                if not self.checks[name]["verified"]
            ]
            applied, why = self.first_applied, ""
            if unproven:
                why = f"not verified with this kind: {', '.join(unproven)}"
        else:
            applied, why = self.apply_replay_lookup(kind, before)
        if not applied:
            self.verdict(where, False, f"Not applied: {why}.")
            return
        back_ok, back_why = self.change_back(kind, seen)
        if not why and back_ok:
            self.verdict(
                where,
                True,
                "Applied, replayed and found by the consistent lookup with the whole change, "
                "then changed back.",
            )
        else:
            self.verdict(where, False, "; ".join(w for w in (why, back_why) if w) + ".")

    def apply_replay_lookup(self, kind: kinds.ChangeKind, order: Order) -> tuple[bool, str]:
        """A change of ``kind`` applied, replayed and looked up: (applied, why it is not
        verified, or "")."""
        where = kind.code
        changes = self.changes_of(kind, where, order)
        if not changes:
            return False, "no change of this kind could be made now"
        change = changes[0]
        first, again, error, _ = self.apply_twice(where, change, order)
        if first is None:
            return False, f"the change was not applied: {_why(error)}"
        key = first.operation_key
        if again is None or not again.replayed or again.order_version != first.order_version:
            return True, f"the repeat was no replay: {_outcome(again, error)}"
        record, error = self.call(
            where, f"GET /operations/{key}", lambda: self.client.get_operation(key)
        )
        if not isinstance(record, OperationRecord) or not _found(
            record, key, self.order_id, change, first
        ):
            answer = _summary(record) if record is not None else _why(error)
            return True, f"the lookup answered another result: {answer}"
        return True, ""

    def change_back(self, kind: kinds.ChangeKind, seen: dict[str, Any]) -> tuple[bool, str]:
        """Put the sandbox order back to ``seen`` with a change of its own (a new key)."""
        where = kind.code
        back = kind.reversal(seen)
        if back is None:
            return False, "no change back to what the order held before"
        current = self.read_order(where)
        if current is None:
            return False, "the order could not be read to change it back"
        result, error = self.send(where, "valid (the change back)", back, version=current.version)
        if not isinstance(result, OperationResult) or result.replayed:
            return False, f"the change back was not applied: {_why(error)}"
        return True, ""

    def probe_kind_by_refusals(self, kind: kinds.ChangeKind) -> None:
        """An irreversible kind is never applied to the sandbox order: the order system must
        refuse its change, in the applying step, for a stale fencing token, an expired grant
        and a stale order version -- proof that it parses the kind and checks it there. The
        first two go with a stale version too, so a receiver that skips the check under test
        still refuses (version_conflict) instead of applying; the stale version alone goes
        last, only after both came right and only when the version check was verified."""
        where = kind.code
        current = self.read_order(where)
        if current is None:
            self.verdict(where, False, "The order could not be read.")
            return
        changes = self.changes_of(kind, where, current)
        if not changes:
            self.verdict(where, False, "No change of this kind to send.")
            return
        change, stale = changes[0], _stale(current.version)
        old, high = self.token(), self.token()
        fenced, error = self.call(
            where,
            f"POST /orders/{self.order_id}/fence token={high}",
            lambda: self.client.fence(self.order_id, high),
        )
        if not isinstance(fenced, FenceResult):
            self.verdict(where, False, f"The fence was not raised: {_why(error)}.")
            return
        failures: list[str] = []
        result, error = self.send(
            where,
            "valid, with a fenced-off token and a stale version",
            change,
            version=stale,
            token=old,
        )
        if not (isinstance(error, Conflict) and error.error == "stale_fencing_token"):
            failures.append(
                f"stale token: expected stale_fencing_token, got {_outcome(result, error)}"
            )
        key = self.key()
        result, error = self.send(
            where,
            "expired but correctly signed, with a stale version",
            change,
            version=stale,
            key=key,
            grant=self.grant(key, change, expires_in=-dt.timedelta(hours=1)),
        )
        if not (isinstance(error, ApprovalRefused) and error.kind == "approval_expired"):
            failures.append(
                f"expired grant: expected approval_expired, got {_outcome(result, error)}"
            )
        if not failures and not self.checks["version_check"]["verified"]:
            failures.append(
                "stale version: not sent (the order system's version check is unverified)"
            )
        if not failures:
            result, error = self.send(where, "valid, with a stale version", change, version=stale)
            if not (isinstance(error, Conflict) and error.error == "version_conflict"):
                failures.append(
                    f"stale version: expected version_conflict, got {_outcome(result, error)}"
                )
        if failures:
            self.verdict(where, False, "; ".join(failures) + ".")
        else:
            self.verdict(
                where,
                True,
                "Refused a fenced-off token, an expired grant and a stale version in the "
                "applying step; never applied to the sandbox order.",
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


def _stale(version: int) -> int:
    """An expected order version that is not ``version``."""
    return version - 1 if version > 0 else version + 1


def _found(
    record: OperationRecord,
    key: str,
    order_id: str,
    change: dict[str, Any],
    first: OperationResult,
) -> bool:
    """The lookup's record is the operation applied: its key, order, whole change, status and
    resulting version."""
    return (
        record.operation_key == key
        and record.order_id == order_id
        and kinds.same_change(kinds.canonical(change), record.change)
        and record.status == "applied"
        and record.order_version == first.order_version
    )


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
