"""The order-system client: Holdfast's only door to the order system (CONTRACT §1).

An anti-corruption layer. It talks through one ``httpx.Client``, parses every answer strictly
into frozen dataclasses, and turns every failure into a classified error from
``reconciliation.exceptions``. It never imports a model; the only Django it touches is
``django.conf.settings`` in ``OrderSystemClient.from_settings`` and for the default credential.

Connections. ``OrderSystemClient.from_settings()`` (without a test transport) hands out clients
that share one ``httpx.Client`` -- one connection pool -- per process and configuration (base URL,
timeouts, headers), so an apply or a source check reuses a kept-alive TCP connection instead of
building a client, an SSL context and a new connection each time. Closing such a client (or
leaving its ``with`` block) leaves the shared pool open for the next caller. A client built
directly, or with its own transport, owns its ``httpx.Client`` and closes it as before.

Every call is counted with its outcome (status code, or the transport failure) and its latency,
per client method (``reconciliation.metrics``, exported at ``/metrics``).

Every request carries ``Authorization: Bearer <ORDER_SYSTEM_TOKEN>``: the order system answers
``401`` to anything without it (``/healthz`` aside).

Retries. This client retries nothing, and nothing below it does: httpx retries nothing by default
(``HTTPTransport(retries=N)`` would retry connection failures only, and it is deliberately not
used), and redirects are not followed. Holdfast's services are the single retry layer: they decide
from the error class, schedule the next attempt through the case's next check time, and never
repeat a write whose effect is unknown.

"Not sent" versus "sent, no answer" is the distinction everything else rests on:

- connect refused or failed, connect or pool timeout: nothing was sent → ``Transient``.
- ``503`` (the contract says nothing was applied) or ``429`` → ``Transient`` with ``retry_after``.
- read or write timeout, a connection dropped or reset after sending, ``500``/``502``/``504``:
  for a write (POST) → ``EffectUnknown``; for a read (GET) → ``Transient`` for transport failures
  and gateway statuses (a GET changes nothing, asking again is harmless).
- an unparseable body, an unexpected status or error code: for a write → ``EffectUnknown``; for
  a read → ``ProtocolViolation``.

Definite refusals (``409``, ``403``, ``422``, ``404`` with a known code, and the order system's
own ``401 unauthorized`` for a credential it does not accept) map to their own errors.
A ``404`` without the contract's error code (a wrong base URL, a proxy page) is never read as
"unknown order/operation": it is a protocol violation.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

# httpx imports its transport (httpcore, h11) when the first client is built: 73 ms of CPU, in
# each worker process of a cluster. Imported with this module, it is loaded once, in the
# process the workers are forked from.
import httpcore  # noqa: F401
import httpx

from cases import kinds
from reconciliation import metrics
from reconciliation.exceptions import (
    APPROVAL_REFUSAL_KINDS,
    CONFLICT_KINDS,
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

TIMEOUT_NAMES = ("connect", "read", "write", "pool")

# Failures raised before any byte of the request could have reached the receiver.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


# --- The shared connection pools -----------------------------------------------------------

_SHARED_LOCK = threading.Lock()
# (process id, base URL, timeouts, headers) -> the one httpx.Client for that configuration. The
# process id keeps a forked child from using its parent's sockets.
_SHARED: dict[tuple[object, ...], httpx.Client] = {}
# Configurations kept at once (tests build many); the oldest is forgotten, not closed (a thread
# may still be using it; its sockets close when it is collected).
_SHARED_MAX = 8


def _verify_for(base_url: str) -> bool:
    """TLS verification for a client of ``base_url``: on for https. A plain-http client never
    speaks TLS (it follows no redirects and sends only paths), so it loads no CA bundle."""
    return not base_url.lower().startswith("http://")


def _build_http_client(
    base_url: str,
    timeout: httpx.Timeout,
    headers: Mapping[str, str],
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    return httpx.Client(
        base_url=base_url,
        timeout=timeout,
        transport=transport,
        follow_redirects=False,
        headers=dict(headers),
        verify=_verify_for(base_url),
    )


def _shared_http_client(
    base_url: str, timeout: httpx.Timeout, headers: Mapping[str, str]
) -> httpx.Client:
    """The process's one ``httpx.Client`` for this configuration, built on first use
    (thread-safe; a closed one is replaced)."""
    key = (
        os.getpid(),
        base_url,
        (timeout.connect, timeout.read, timeout.write, timeout.pool),
        tuple(sorted(headers.items())),
    )
    with _SHARED_LOCK:
        client = _SHARED.get(key)
        if client is None or client.is_closed:
            client = _build_http_client(base_url, timeout, headers)
            _SHARED.pop(key, None)
            while len(_SHARED) >= _SHARED_MAX:
                _SHARED.pop(next(iter(_SHARED)))
            _SHARED[key] = client
        return client


def close_shared_clients() -> None:
    """Close every shared pool of this process (tests, shutdown); the next use builds anew."""
    with _SHARED_LOCK:
        clients = list(_SHARED.values())
        _SHARED.clear()
    for client in clients:
        client.close()


class _Malformed(Exception):
    """An answer that does not follow the contract; turned into the caller's error class."""


# --- Results -------------------------------------------------------------------------------


# The fields of ``GET /orders/{id}`` every order has; every other field is a change kind's
# (``Order.fields``).
_ORDER_GENERIC = ("order_id", "account_id", "version", "status")
ORDER_STATUSES = ("open", "shipped", "cancelled")


@dataclass(frozen=True, slots=True)
class Order:
    """An order as the order system shows it: the generic fields, and every other field it
    sent (each change kind's own, built-in or plug-in) in ``fields``, read by the change kinds
    (``cases.kinds``)."""

    order_id: str
    account_id: str
    version: int
    status: str
    fields: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Slot:
    date: dt.date
    capacity: int
    taken: int

    @property
    def free(self) -> int:
        return max(self.capacity - self.taken, 0)


@dataclass(frozen=True, slots=True)
class OperationResult:
    """The receiver's answer to an applied operation. ``replayed`` is True for a ``200`` repeat
    of the same key and body, which returns the first result and changed nothing."""

    operation_key: str
    status: str
    order_version: int
    replayed: bool


@dataclass(frozen=True, slots=True)
class FenceResult:
    order_id: str
    min_token: int


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """``GET /operations/{key}``: the operation as the order system recorded it, its
    ``change`` exactly as it was received (compared whole: ``cases.kinds.same_change``)."""

    operation_key: str
    order_id: str
    status: str
    order_version: int | None
    change: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SeenOperation:
    operation_key: str
    order_id: str
    fencing_token: int
    approval_id: str


@dataclass(frozen=True, slots=True)
class FencesSeen:
    """``GET /fences/max``: the highest fencing token the order system has seen and the
    operations it applied above a given token (restore detection from the source)."""

    max_token: int
    operations: tuple[SeenOperation, ...]
    truncated: bool


# --- Strict parsing helpers ----------------------------------------------------------------


def _field(body: Mapping[str, Any], name: str, kind: type) -> Any:
    if name not in body:
        raise _Malformed(f"missing field {name!r}")
    value = body[name]
    # bool is an int subclass; a JSON true is never a version or a token.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Malformed(f"field {name!r} is {type(value).__name__}, expected {kind.__name__}")
    return value


def _date(body: Mapping[str, Any], name: str) -> dt.date:
    text = _field(body, name, str)
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise _Malformed(f"field {name!r} is not a YYYY-MM-DD date: {text!r}") from None


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise _Malformed(f"HTTP {response.status_code} with a body that is not JSON") from None
    if not isinstance(body, dict):
        raise _Malformed(f"HTTP {response.status_code} with a JSON {type(body).__name__}")
    return body


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max((when - dt.datetime.now(dt.UTC)).total_seconds(), 0.0)


def _error_fields(body: Mapping[str, Any]) -> dict[str, list[str]]:
    raw = body.get("fields", body.get("errors"))
    if isinstance(raw, Mapping):
        return {
            str(name): [str(m) for m in (msgs if isinstance(msgs, list) else [msgs])]
            for name, msgs in raw.items()
        }
    if isinstance(raw, list):
        return {str(name): [] for name in raw}
    return {}


# (status, error code) → the definite refusal it means; ``kind``: the change's kind, whose own
# refusals (and the generic ones of every kind, ``cases.kinds.refusal_class``) count too.
def _definite_error(
    status: int, code: str, detail: str, body: Mapping[str, Any], *, kind: str = ""
) -> OrderSystemError | None:
    if status == 409 and code in CONFLICT_KINDS:
        return Conflict(code, detail, status=status)
    refusal = kinds.refusal_class(kind, code) if status in (409, 422) else None
    if refusal is kinds.ErrorClass.CONFLICT:
        return Conflict(code, detail, status=status)
    if refusal is kinds.ErrorClass.INVALID_INPUT:
        return InvalidInput(code, detail, status=status, fields=_error_fields(body))
    if status == 403 and code in APPROVAL_REFUSAL_KINDS:
        return ApprovalRefused(code, detail, status=status)
    if status == 403 and code == "permission_revoked":
        return PermissionRevoked(code, detail, status=status)
    if status in (400, 422) and code in ("invalid_field", "invalid_request"):
        return InvalidInput(code, detail, status=status, fields=_error_fields(body))
    if status == 422 and code == "key_reused":
        return KeyReused(code, detail, status=status)
    if status == 404 and code == "unknown_order":
        return UnknownOrder(code, detail, status=status)
    if status == 404 and code == "unknown_operation":
        return UnknownOperation(code, detail, status=status)
    if status == 401 and code == "unauthorized":
        return CredentialRefused(code, detail, status=status)
    return None


# --- The client ----------------------------------------------------------------------------


class OrderSystemClient:
    """A client of one order system. Use as a context manager, or call ``close()``: that closes
    the connection pool only when this client owns it (not a shared one)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeouts: Mapping[str, float],
        transport: httpx.BaseTransport | None = None,
        token: str | None = None,
        shared: bool = False,
    ):
        """``token``: the order system's credential; ``None`` means
        ``settings.ORDER_SYSTEM_TOKEN``, ``""`` sends none. ``shared``: use the process's
        pool for this configuration (ignored with a ``transport``, which gets its own)."""
        missing = [name for name in TIMEOUT_NAMES if name not in timeouts]
        if missing:
            raise ValueError(f"timeouts must name {', '.join(TIMEOUT_NAMES)}; missing {missing}")
        self.base_url = base_url.rstrip("/")
        self.timeout = httpx.Timeout(
            connect=float(timeouts["connect"]),
            read=float(timeouts["read"]),
            write=float(timeouts["write"]),
            pool=float(timeouts["pool"]),
        )
        if token is None:
            from django.conf import settings

            token = settings.ORDER_SYSTEM_TOKEN
        headers = {"Accept": "application/json", "User-Agent": "holdfast-reconciliation"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.shared = shared and transport is None
        if self.shared:
            self._client = _shared_http_client(self.base_url, self.timeout, headers)
        else:
            self._client = _build_http_client(self.base_url, self.timeout, headers, transport)

    @classmethod
    def from_settings(cls, *, transport: httpx.BaseTransport | None = None) -> OrderSystemClient:
        """A client of the configured order system over the process's shared pool (kept-alive
        connections); with a ``transport`` (tests), a private client that owns it."""
        from django.conf import settings

        return cls(
            settings.ORDER_SYSTEM_URL,
            timeouts=settings.ORDER_SYSTEM_TIMEOUTS,
            transport=transport,
            token=settings.ORDER_SYSTEM_TOKEN,
            shared=True,
        )

    def close(self) -> None:
        """Close the pool this client owns; a shared pool stays open for the next caller."""
        if not self.shared:
            self._client.close()

    def __enter__(self) -> OrderSystemClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- reads ---------------------------------------------------------------------------

    def get_order(self, order_id: str) -> Order:
        body = self._read("get_order", "GET", f"/orders/{_seg(order_id)}")

        def parse() -> Order:
            status = _field(body, "status", str)
            if status not in ORDER_STATUSES:
                raise _Malformed(f"field 'status' is {status!r}, not one of {ORDER_STATUSES}")
            return Order(
                order_id=_field(body, "order_id", str),
                account_id=_field(body, "account_id", str),
                version=_field(body, "version", int),
                status=status,
                fields={k: v for k, v in body.items() if k not in _ORDER_GENERIC},
            )

        return self._parse(parse, write=False)

    def get_slot(self, date: dt.date) -> Slot:
        body = self._read("get_slot", "GET", f"/slots/{date.isoformat()}")
        return self._parse(
            lambda: Slot(
                date=_date(body, "date"),
                capacity=_field(body, "capacity", int),
                taken=_field(body, "taken", int),
            ),
            write=False,
        )

    def get_operation(self, operation_key: str) -> OperationRecord:
        """The consistent lookup. Raises ``UnknownOperation`` on ``404 unknown_operation``:
        proof of no effect only after a fence above every attempt's token."""
        body = self._read("get_operation", "GET", f"/operations/{_seg(operation_key)}")
        return self._parse(lambda: _operation_record(body), write=False)

    def search_operation(self, operation_key: str) -> OperationRecord | None:
        """The lagging search index. ``None`` means "not indexed yet", **never** "not applied":
        callers must not treat it as proof of anything and must keep a case held on it."""
        body = self._read(
            "search_operation",
            "GET",
            "/search/operations",
            params={"key": operation_key},
            absent=True,
        )
        if body is None:
            return None
        return self._parse(lambda: _operation_record(body), write=False)

    def capabilities(self) -> dict[str, Any]:
        """What the receiver *claims*. Only the probe's live checks are evidence."""
        return self._read("capabilities", "GET", "/capabilities")

    def fences_seen(self, *, above: int = 0, order_id: str = "") -> FencesSeen:
        """The highest fencing token seen (over every order, or ``order_id``'s) and the
        operations applied with a token above ``above``."""
        params = {"above": str(above), **({"order_id": order_id} if order_id else {})}
        body = self._read("fences_seen", "GET", "/fences/max", params=params)

        def parse() -> FencesSeen:
            raw = _field(body, "operations", list)
            if not all(isinstance(item, dict) for item in raw):
                raise _Malformed("field 'operations' holds a non-object")
            return FencesSeen(
                max_token=_field(body, "max_token", int),
                operations=tuple(
                    SeenOperation(
                        operation_key=_field(item, "operation_key", str),
                        order_id=_field(item, "order_id", str),
                        fencing_token=_field(item, "fencing_token", int),
                        approval_id=_field(item, "approval_id", str),
                    )
                    for item in raw
                ),
                truncated=_field(body, "truncated", bool),
            )

        return self._parse(parse, write=False)

    # --- writes --------------------------------------------------------------------------

    def apply_operation(
        self,
        order_id: str,
        *,
        operation_key: str,
        change: Mapping[str, Any],
        expected_version: int,
        fencing_token: int,
        approval_grant: str,
    ) -> OperationResult:
        """Send ``change`` (whole, as stored and signed) under ``operation_key``. A refusal is
        classified by the change's kind's refusals and the generic ones (``cases.kinds``)."""
        payload = {
            "operation_key": operation_key,
            "change": dict(change),
            "expected_version": expected_version,
            "fencing_token": fencing_token,
            "approval_grant": approval_grant,
        }
        response, body = self._write(
            f"/orders/{_seg(order_id)}/operations",
            payload,
            ok=(200, 201),
            call="apply_operation",
            kind=str(change.get("kind") or ""),
        )

        def parse() -> OperationResult:
            result = OperationResult(
                operation_key=_field(body, "operation_key", str),
                status=_field(body, "status", str),
                order_version=_field(body, "order_version", int),
                replayed=response.status_code == 200,
            )
            if result.operation_key != operation_key:
                raise _Malformed(f"answer names operation {result.operation_key!r}")
            if result.status != "applied":
                raise _Malformed(f"status {result.status!r} in a success answer")
            return result

        return self._parse(parse, write=True)

    def fence(self, order_id: str, fencing_token: int) -> FenceResult:
        """Raise the order's minimum fencing token; later operations below it are refused."""
        _, body = self._write(
            f"/orders/{_seg(order_id)}/fence", {"fencing_token": fencing_token}, call="fence"
        )
        result = self._parse(
            lambda: FenceResult(
                order_id=_field(body, "order_id", str),
                min_token=_field(body, "min_token", int),
            ),
            write=True,
        )
        if result.order_id != order_id or result.min_token < fencing_token:
            # A "200" that does not show the door closed is no fence: nothing may be proven
            # absent on the strength of it.
            raise EffectUnknown(
                "fence_not_confirmed",
                f"The fence answer for {order_id} shows {result.order_id} at min_token "
                f"{result.min_token}, not at least {fencing_token}.",
            )
        return result

    # --- transport and classification ------------------------------------------------------

    def _read(
        self,
        call: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        absent=False,
    ) -> Any:
        try:
            with metrics.order_system_call(call) as answer:
                response = self._client.request(method, path, params=params)
                answer["outcome"] = str(response.status_code)
        except _NOT_SENT as exc:
            raise Transient("connect_failed", _describe(exc)) from exc
        except httpx.TransportError as exc:
            # A GET changes nothing: asking again later is harmless.
            raise Transient("no_answer", _describe(exc)) from exc
        except httpx.HTTPError as exc:  # e.g. an answer whose body cannot be decoded
            raise ProtocolViolation("undecodable_answer", _describe(exc)) from exc
        if response.status_code == 200:
            return self._parse(lambda: _json_object(response), write=False)
        if absent and response.status_code == 404:
            return None
        raise self._error_for(response, write=False)

    def _write(
        self,
        path: str,
        payload: Mapping[str, Any],
        *,
        ok: tuple[int, ...] = (200,),
        call: str = "other_write",
        kind: str = "",
    ) -> tuple[httpx.Response, dict[str, Any]]:
        try:
            with metrics.order_system_call(call) as answer:
                response = self._client.post(path, json=payload)
                answer["outcome"] = str(response.status_code)
        except _NOT_SENT as exc:
            raise Transient("connect_failed", _describe(exc)) from exc
        except httpx.TransportError as exc:
            # Read/write timeout, connection dropped or reset: the request may have arrived.
            raise EffectUnknown("no_answer", _describe(exc)) from exc
        except httpx.HTTPError as exc:
            # The request went out and the answer cannot be read (e.g. a broken body).
            raise EffectUnknown("undecodable_answer", _describe(exc)) from exc
        if response.status_code in ok:
            return response, self._parse(lambda: _json_object(response), write=True)
        raise self._error_for(response, write=True, kind=kind)

    @staticmethod
    def _parse(build, *, write: bool):
        try:
            return build()
        except _Malformed as exc:
            cls = EffectUnknown if write else ProtocolViolation
            raise cls("protocol_violation", str(exc)) from None

    @staticmethod
    def _error_for(response: httpx.Response, *, write: bool, kind: str = "") -> OrderSystemError:
        status = response.status_code
        try:
            body = _json_object(response)
        except _Malformed:
            body = {}
        raw_code, raw_detail = body.get("error"), body.get("detail")
        code = raw_code if isinstance(raw_code, str) else ""
        detail = raw_detail if isinstance(raw_detail, str) else ""
        # Only the contract's own "503 unavailable" promises that nothing was applied. A bare
        # 503 or a 429 may come from something in front of the order system after the write
        # was forwarded: for a write that is no promise at all.
        if (status == 503 and code == "unavailable") or (not write and status in (503, 429)):
            return Transient(
                code or "unavailable",
                detail or f"HTTP {status}",
                status=status,
                retry_after=_retry_after(response),
            )
        definite = _definite_error(status, code, detail, body, kind=kind)
        if definite is not None:
            return definite
        explanation = detail or f"unexpected HTTP {status}" + (f" ({code})" if code else "")
        if write:
            # A 500/502/504 or an answer outside the contract: the write may have been applied.
            return EffectUnknown(code or "unexpected_status", explanation, status=status)
        if status in (502, 504):
            return Transient(code or "bad_gateway", explanation, status=status)
        return ProtocolViolation(code or "unexpected_status", explanation, status=status)


def _operation_record(body: Mapping[str, Any]) -> OperationRecord:
    change = _field(body, "change", dict)
    order_version = body.get("order_version")
    if order_version is not None:
        order_version = _field(body, "order_version", int)
    return OperationRecord(
        operation_key=_field(body, "operation_key", str),
        order_id=_field(body, "order_id", str),
        status=_field(body, "status", str),
        order_version=order_version,
        change=dict(change),
    )


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _seg(value: str) -> str:
    """One URL path segment: an id can never add a path component or a query."""
    return quote(value, safe="")
