"""The order system answers only Holdfast: every call but ``/healthz`` needs the credential,
and in production the fault and testing endpoints do not exist."""

from __future__ import annotations

import secrets

import pytest

from orders.models import FaultRule
from tests.orders.helpers import ORDER_ID, Api, operation_body, snapshot
from tests.support.order_system import OrderSystemProcess

pytestmark = pytest.mark.usefixtures("seeded")

CALLS = [
    ("post", f"/orders/{ORDER_ID}/operations"),
    ("post", f"/orders/{ORDER_ID}/fence"),
    ("get", f"/orders/{ORDER_ID}"),
    ("get", "/slots/2031-03-08"),
    ("get", "/operations/DATE-1-1"),
    ("get", "/search/operations"),
    ("get", "/capabilities"),
    ("get", "/fences/max"),
    ("get", "/_faults/"),
    ("post", "/_faults/"),
    ("delete", "/_faults/"),
    ("post", "/_faults/search-lag"),
    ("post", "/_testing/reset"),
    ("post", "/_testing/seed"),
    ("post", "/_testing/accounts/ACC-1/access"),
    ("get", f"/_testing/orders/{ORDER_ID}/state"),
    ("get", "/_testing/outbox"),
    ("get", "/no/such/path"),
]
BAD_CREDENTIALS = {
    "none": "",
    "wrong token": "Bearer not-the-token",
    "empty bearer": "Bearer ",
    "other scheme": "Basic ZGV2LW9yZGVyLXN5c3RlbS10b2tlbg==",
}


def _bodies(method: str, path: str) -> dict:
    if path.endswith("/operations") and method == "post":
        return operation_body()
    if path.endswith("/fence"):
        return {"fencing_token": 2**62}
    if path.endswith("/access"):
        return {"active": False}
    return {}


@pytest.mark.usefixtures("faults_on")
@pytest.mark.parametrize("credential", list(BAD_CREDENTIALS))
@pytest.mark.parametrize(("method", "path"), CALLS)
def test_every_call_without_the_credential_is_401_and_changes_nothing(
    client, method, path, credential
):
    header = BAD_CREDENTIALS[credential]
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    before = snapshot()
    rules = FaultRule.objects.count()

    if method == "post":
        body = _bodies(method, path)
        response = client.post(path, data=body, content_type="application/json", **extra)
    else:
        response = getattr(client, method)(path, **extra)

    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert snapshot() == before
    assert FaultRule.objects.count() == rules


def test_anyone_cannot_raise_the_fence_but_holdfast_can(client, api):
    anyone = client.post(
        f"/orders/{ORDER_ID}/fence", data={"fencing_token": 2**62}, content_type="application/json"
    )
    holdfast = api.post(f"/orders/{ORDER_ID}/fence", {"fencing_token": 9})

    assert anyone.status_code == 401
    assert holdfast.status_code == 200, holdfast.json()
    assert holdfast.json()["min_token"] == 9


def test_healthz_stays_open(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.usefixtures("faults_on")
def test_a_request_without_the_credential_consumes_no_fault(client, api):
    FaultRule.objects.create(kind="unavailable", remaining=1, path_prefix="/orders/")

    assert client.get(f"/orders/{ORDER_ID}").status_code == 401
    assert api.get(f"/orders/{ORDER_ID}").status_code == 503
    assert api.get(f"/orders/{ORDER_ID}").status_code == 200


def test_a_changed_token_locks_out_the_old_one(client, settings):
    old = Api(client, token=settings.ORDERS_API_TOKEN)
    settings.ORDERS_API_TOKEN = "a-rotated-order-system-token-of-40-chars"

    assert old.get(f"/orders/{ORDER_ID}").status_code == 401
    assert Api(client).get(f"/orders/{ORDER_ID}").status_code == 200


@pytest.mark.order_system
def test_in_production_the_testing_and_fault_endpoints_do_not_exist():
    """Started with DJANGO_ENV=production, good secrets and the credential: ``/_testing/``
    and ``/_faults/`` are 404 (not routed), everything else still needs the token."""
    token = secrets.token_urlsafe(48)
    production = OrderSystemProcess(
        api_token=token,
        grant_key=secrets.token_urlsafe(48),
        webhook_secret=secrets.token_urlsafe(48),
        extra_env={
            "DJANGO_ENV": "production",
            "ORDERS_FAULTS_ENABLED": "0",
            "SECRET_KEY": secrets.token_urlsafe(48),
        },
    )
    with production as system:
        reset = system.client.post("/_testing/reset")
        seed = system.client.post("/_testing/seed", json={"orders": []})
        faults = system.client.post("/_faults/", json={"kind": "unavailable"})
        capabilities = system.client.get("/capabilities")
        anonymous_reset = system.client.post("/_testing/reset", headers={"Authorization": ""})
        anonymous_fence = system.client.post(
            "/orders/ORD-PROBE/fence", json={"fencing_token": 2**62}, headers={"Authorization": ""}
        )

    assert (reset.status_code, reset.json()["error"]) == (404, "not_found")
    assert seed.status_code == 404
    assert faults.status_code == 404
    assert capabilities.status_code == 200
    assert anonymous_reset.status_code == 401
    assert anonymous_fence.status_code == 401


@pytest.mark.order_system
def test_production_with_fault_injection_does_not_start():
    process = OrderSystemProcess(
        api_token=secrets.token_urlsafe(48),
        grant_key=secrets.token_urlsafe(48),
        webhook_secret=secrets.token_urlsafe(48),
        extra_env={
            "DJANGO_ENV": "production",
            "ORDERS_FAULTS_ENABLED": "1",
            "SECRET_KEY": secrets.token_urlsafe(48),
        },
        startup_timeout=20,
    )

    with pytest.raises(RuntimeError, match="ORDERS_FAULTS_ENABLED must be off"):
        process.start()
