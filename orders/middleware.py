"""The request log, the credential check in front of every view, and injected faults around
the views (see ``orders.faults``)."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import re
import socket
import time

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException

from orders.faults import fault_take, faults_enabled, faults_live, is_faultable, reset_mark
from orders.models import FaultRule
from orders.server import DROPPED_KEY, SOCKET_KEY

logger = logging.getLogger(__name__)
Kind = FaultRule.Kind


class _RollBack(Exception):
    pass


def unavailable(detail: str, retry_after: int | None = None) -> JsonResponse:
    response = JsonResponse({"error": "unavailable", "detail": detail}, status=503)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


# Open without the credential: a liveness check that says nothing about orders.
OPEN_PATHS = frozenset({"/healthz"})


def unauthorized() -> JsonResponse:
    response = JsonResponse(
        {"error": "unauthorized", "detail": "Send Authorization: Bearer <ORDERS_API_TOKEN>."},
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="orders"'
    return response


def bearer_token_ok(request: HttpRequest) -> bool:
    """The request carries ``Authorization: Bearer <ORDERS_API_TOKEN>`` (constant-time)."""
    # ``request.headers["Authorization"]`` is ``META["HTTP_AUTHORIZATION"]``; read directly,
    # without building the whole header mapping on every request.
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    expected = settings.ORDERS_API_TOKEN
    if scheme.lower() != "bearer" or not token or not expected:
        return False
    return hmac.compare_digest(token.strip().encode(), expected.encode())


request_log = logging.getLogger("orders.requests")
# Body fields that identify an operation and its attempt; never the grant or the credential.
_LOGGED_FIELDS = ("operation_key", "fencing_token")
_LOGGED_BODY_MAX = 64 * 1024
_PLAIN = re.compile(r"[A-Za-z0-9._:-]+")


def _logged_fields(request: HttpRequest) -> str:
    if request.method != "POST" or request.content_type != "application/json":
        return ""
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > _LOGGED_BODY_MAX:
            return ""
        body = json.loads(request.body)
    except (ValueError, RecursionError, RawPostDataException):
        return ""
    if not isinstance(body, dict):
        return ""
    parts = []
    for name in _LOGGED_FIELDS:
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, str | int):
            continue
        # A key is printed as sent only when it has a key's characters (no log injection).
        text = str(value)[:200]
        parts.append(f"{name}={text if _PLAIN.fullmatch(text) else repr(text)}")
    return " ".join(parts)


class ContentLengthMiddleware:
    """Every non-streaming answer carries its ``Content-Length`` (the views' JSON, refusals,
    injected 503s, 404s): without one the server must close the connection after the answer,
    and HTTP/1.1 keep-alive is lost. Outermost, so no answer escapes it."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not response.streaming and not response.has_header("Content-Length"):
            response["Content-Length"] = str(len(response.content))
        return response


class RequestLogMiddleware:
    """One line per request on ``orders.requests`` (INFO): method, path, status, milliseconds,
    and the operation key and fencing token a write carries -- so what reached this system can
    be read afterwards. The approval grant and the Authorization header are never logged. A
    response dropped on purpose (``drop_after_commit``) is marked ``dropped``."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.monotonic()
        fields = _logged_fields(request)
        response = self.get_response(request)
        elapsed_ms = (time.monotonic() - started) * 1000
        dropped = " dropped" if request.META.get(DROPPED_KEY) else ""
        request_log.info(
            "%s %s %s %.1fms%s%s",
            request.method,
            request.path_info,
            response.status_code,
            elapsed_ms,
            f" {fields}" if fields else "",
            dropped,
        )
        return response


class ApiTokenMiddleware:
    """Every endpoint except ``/healthz`` (writes, fences, reads, faults, testing, unknown
    paths) answers ``401 {"error": "unauthorized"}`` without the shared credential."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info in OPEN_PATHS or bearer_token_ok(request):
            return self.get_response(request)
        return unauthorized()


class FaultInjectionMiddleware:
    """``latency`` and ``unavailable`` before the view (a request delayed across a testing
    reset is answered 503 and not run); ``fail_before_commit`` runs the view in an outer
    transaction that is rolled back; ``delay_after_commit`` and ``drop_after_commit`` act once
    the view's transaction has committed."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        if not faults_enabled() or not is_faultable(path):
            return self.get_response(request)
        method = request.method or "GET"

        # One read of the rules that act before the view, one of those that act after it.
        before = faults_live(
            {Kind.LATENCY, Kind.UNAVAILABLE, Kind.FAIL_BEFORE_COMMIT}, path=path, method=method
        )
        # Read before the rule is taken: a reset the moment after it still counts.
        mark = reset_mark() if any(r.kind == Kind.LATENCY for r in before) else 0
        if rule := fault_take(Kind.LATENCY, path=path, method=method, live=before):
            time.sleep(rule.seconds)
            if reset_mark() != mark:
                # The test that sent it is over (its client is often a killed worker): run on
                # the next test's rows, it would write what nobody there sent.
                return unavailable("Injected fault: the system was reset while this was delayed.")
        if rule := fault_take(Kind.UNAVAILABLE, path=path, method=method, live=before):
            return unavailable("Injected fault: unavailable.", rule.retry_after)
        if rule := fault_take(Kind.FAIL_BEFORE_COMMIT, path=path, method=method, live=before):
            try:
                with transaction.atomic():
                    self.get_response(request)
                    raise _RollBack
            except _RollBack:
                pass
            return unavailable("Injected fault: failed before commit.", rule.retry_after)

        response = self.get_response(request)

        after = faults_live(
            {Kind.DELAY_AFTER_COMMIT, Kind.DROP_AFTER_COMMIT}, path=path, method=method
        )
        if rule := fault_take(Kind.DELAY_AFTER_COMMIT, path=path, method=method, live=after):
            time.sleep(rule.seconds)
        if fault_take(Kind.DROP_AFTER_COMMIT, path=path, method=method, live=after):
            self._drop(request)
        return response

    @staticmethod
    def _drop(request: HttpRequest) -> None:
        """Close the client's TCP connection; the server swallows the failed write."""
        sock = request.META.get(SOCKET_KEY)
        request.META[DROPPED_KEY] = sock is not None
        if sock is None:
            logger.warning("drop_after_commit needs the bundled server (orders.server).")
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
