"""Thin HTTP views over ``orders.services``; every error is ``{"error", "detail", "fields"?}``."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from orders import faults, outbox, services
from orders.exceptions import Refused, invalid
from orders.models import OutboxEvent


def _json_body(request: HttpRequest) -> object:
    if not request.body:
        return {}
    try:
        return json.loads(request.body)
    except (UnicodeDecodeError, ValueError):
        raise invalid({"body": "Must be JSON."}) from None


def api(*methods: str) -> Callable:
    """CSRF-exempt, method-checked, with ``Refused`` turned into its JSON answer."""

    def decorate(view: Callable) -> Callable:
        @csrf_exempt
        @require_http_methods(list(methods))
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except Refused as refusal:
                return JsonResponse(refusal.as_json(), status=refusal.status)

        return wrapper

    return decorate


def gated(view: Callable) -> Callable:
    """404 unless fault injection (and with it the testing endpoints) is enabled."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not faults.faults_enabled():
            return not_found(request)
        return view(request, *args, **kwargs)

    return wrapper


@api("GET")
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@api("GET")
def capabilities(request: HttpRequest) -> HttpResponse:
    return JsonResponse(services.capabilities_json())


@api("GET")
def order_detail(request: HttpRequest, order_id: str) -> HttpResponse:
    return JsonResponse(services.order_json(order_id=order_id))


@api("GET")
def slot_detail(request: HttpRequest, day: str) -> HttpResponse:
    return JsonResponse(services.slot_get(day=day))


@api("POST")
def operation_create(request: HttpRequest, order_id: str) -> HttpResponse:
    operation = services.operation_request_parse(order_id=order_id, body=_json_body(request))
    outcome = services.operation_apply(request=operation)
    return JsonResponse(outcome.body, status=outcome.status)


@api("POST")
def fence(request: HttpRequest, order_id: str) -> HttpResponse:
    return JsonResponse(services.fence_raise(order_id=order_id, body=_json_body(request)))


@api("GET")
def fences_max(request: HttpRequest) -> HttpResponse:
    return JsonResponse(
        services.fences_max(
            order_id=request.GET.get("order_id", ""), above=request.GET.get("above")
        )
    )


@api("GET")
def operation_detail(request: HttpRequest, operation_key: str) -> HttpResponse:
    return JsonResponse(services.operation_get(operation_key=operation_key).as_json())


@api("GET")
def operation_search(request: HttpRequest) -> HttpResponse:
    key = request.GET.get("key", "")
    if not key:
        raise invalid({"key": "Name the operation key to search for."})
    return JsonResponse(services.operation_search(operation_key=key).as_json())


# --- Fault control and testing endpoints (404 unless ORDERS_FAULTS_ENABLED) ----------------


@gated
@api("GET", "POST", "DELETE")
def fault_rules(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        body = _json_body(request)
        if not isinstance(body, dict):
            raise invalid({"body": "Must be a JSON object."})
        rule = faults.fault_add(
            kind=body.get("kind", ""),
            path_prefix=body.get("path_prefix", "/"),
            times=body.get("times", 1),
            seconds=body.get("seconds", 0.0),
            retry_after=body.get("retry_after"),
        )
        return JsonResponse(rule.as_json(), status=201)
    if request.method == "DELETE":
        faults.faults_clear()
    return JsonResponse({"faults": [rule.as_json() for rule in faults.faults_list()]})


@gated
@api("POST")
def search_lag(request: HttpRequest) -> HttpResponse:
    body = _json_body(request)
    seconds = body.get("seconds") if isinstance(body, dict) else None
    return JsonResponse(faults.search_lag_set(seconds=seconds).as_json(), status=201)


@gated
@api("POST")
def testing_reset(request: HttpRequest) -> HttpResponse:
    services.testing_reset()
    return JsonResponse({"status": "reset"})


@gated
@api("POST")
def testing_seed(request: HttpRequest) -> HttpResponse:
    return JsonResponse(services.testing_seed(data=_json_body(request)))


@gated
@api("POST")
def testing_access(request: HttpRequest, account_id: str) -> HttpResponse:
    body = _json_body(request)
    active = body.get("active") if isinstance(body, dict) else None
    if not isinstance(active, bool):
        raise invalid({"active": "Must be true or false."})
    account = services.account_set_access(account_id=account_id, active=active)
    return JsonResponse({"account_id": account.account_id, "access_active": account.access_active})


@gated
@api("POST")
def testing_order(request: HttpRequest, order_id: str) -> HttpResponse:
    order = services.testing_order_set(order_id=order_id, data=_json_body(request))
    return JsonResponse(order.as_json())


@gated
@api("GET")
def testing_state(request: HttpRequest, order_id: str) -> HttpResponse:
    return JsonResponse(services.order_state(order_id=order_id))


@gated
@api("GET")
def testing_outbox(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"events": [event.as_json() for event in services.outbox_events()]})


@gated
@api("POST")
def testing_resend(request: HttpRequest, event_id: str) -> HttpResponse:
    """Resend one event by hand (as ``orders_resend_event``): signed anew, same id and body."""
    try:
        error = outbox.event_resend(event_id=event_id)
    except OutboxEvent.DoesNotExist:
        raise Refused(404, "unknown_event", f"No outbox event {event_id}.") from None
    return JsonResponse({"event_id": event_id, "accepted": error is None, "error": error})


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return JsonResponse({"error": "not_found", "detail": "No such endpoint."}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"error": "server_error", "detail": "Internal error."}, status=500)
