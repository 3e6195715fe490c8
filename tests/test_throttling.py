"""Login lockout (django-axes), API and webhook throttles, and 401 for missing or bad tokens."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from axes.models import AccessAttempt
from django.core.cache import caches
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

ROOT = Path(__file__).resolve().parent.parent
LOGIN = "/admin/login/?next=/admin/"
CASES = "/api/cases/"
HOOK = "/api/hooks/orders/"


@pytest.fixture
def throttle_cache():
    """The throttle counters start and end empty, so no other test sees these requests."""
    caches["throttle"].clear()
    yield caches["throttle"]
    caches["throttle"].clear()


@pytest.fixture
def rates(settings, throttle_cache):
    """Set API rates for one test (the throttles read them per request)."""

    def set_rates(**overrides):
        current = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {**current, **overrides},
        }

    return set_rates


def _login(client: Client, username: str, password: str, addr: str = "10.0.0.1"):
    return client.post(
        LOGIN, {"username": username, "password": password}, REMOTE_ADDR=addr, follow=False
    )


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


# --- login lockout ----------------------------------------------------------------------------


def test_wrong_passwords_lock_the_login_even_for_the_right_password(lead):
    client = Client()
    for _ in range(4):
        assert _login(client, "lead", "wrong").status_code == 200
    assert _login(client, "lead", "wrong").status_code == 429, "the fifth failure locks"
    response = _login(client, "lead", "pw")
    assert response.status_code == 429
    assert not _logged_in(client)
    page = response.content.decode()
    assert "Login paused" in page
    assert "failed 5 times in a row" in page
    assert "Try again in 15 minutes" in page


def test_the_lockout_stops_every_further_try(lead):
    client = Client()
    for _ in range(40):
        _login(client, "lead", "wrong")
    assert _login(client, "lead", "pw").status_code == 429
    assert not _logged_in(client)


def test_a_successful_login_resets_the_failure_count(lead):
    client = Client()
    for _ in range(4):
        _login(client, "lead", "wrong")
    assert _login(client, "lead", "pw").status_code == 302
    client.logout()
    for _ in range(4):
        _login(client, "lead", "wrong")
    assert _login(client, "lead", "pw").status_code == 302
    assert _logged_in(client)


def test_the_lockout_is_per_username_and_address(lead, agent):
    for _ in range(5):
        _login(Client(), "lead", "wrong", addr="10.0.0.1")
    elsewhere, colleague = Client(), Client()
    assert _login(elsewhere, "lead", "pw", addr="10.0.0.2").status_code == 302
    assert _login(colleague, "agent", "pw", addr="10.0.0.1").status_code == 302
    assert _logged_in(elsewhere)
    assert _logged_in(colleague)


def test_the_lockout_lifts_after_the_cool_off(lead):
    for _ in range(5):
        _login(Client(), "lead", "wrong")
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    client = Client()
    assert _login(client, "lead", "pw").status_code == 302
    assert _logged_in(client)


def test_the_failure_limit_is_a_setting(lead, settings):
    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        _login(Client(), "lead", "wrong")
    assert _login(Client(), "lead", "pw").status_code == 429


def _settings_in_subprocess(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); " + code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_limits_come_from_the_environment():
    done = _settings_in_subprocess(
        {
            "AXES_FAILURE_LIMIT": "3",
            "AXES_COOLOFF_MINUTES": "30",
            "API_THROTTLE_USER": "100/hour",
            "API_THROTTLE_ANON": "off",
            "API_THROTTLE_HOOKS": "50/min",
        },
        "from django.conf import settings as s; r = s.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'];"
        "print(s.AXES_FAILURE_LIMIT, s.AXES_COOLOFF_TIME.seconds,"
        " r['user'], r['anon'], r['hooks'])",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "1800", "100/hour", "None", "50/min"]


def test_a_malformed_rate_refuses_to_start():
    done = _settings_in_subprocess({"API_THROTTLE_USER": "lots"}, "")
    assert done.returncode != 0
    assert "API_THROTTLE_USER='lots'" in done.stderr


# --- 401 for missing and bad tokens; the session still works ---------------------------------


def test_a_request_without_credentials_is_401_with_the_token_challenge(db, throttle_cache):
    response = APIClient().get(CASES)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["error"] == "not_authenticated"


def test_a_bad_token_is_401_authentication_failed(db, throttle_cache):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    response = client.get(CASES)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["error"] == "authentication_failed"


def test_a_real_token_is_accepted(lead, throttle_cache):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=lead).key}")
    assert client.get(CASES).status_code == 200


def test_the_session_still_authenticates_and_still_needs_csrf(lead, case, throttle_cache):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(lead)
    assert client.get(CASES).status_code == 200
    refused = client.post(
        f"{CASES}{case.reference}/cancel/", {"reason": "customer withdrew"}, format="json"
    )
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]


# --- throttles -------------------------------------------------------------------------------


def _assert_throttled(response):
    assert response.status_code == 429
    body = response.json()
    assert body["error"] == "throttled"
    assert body["detail"]
    assert isinstance(body["retry_after"], int)
    assert 0 < body["retry_after"] <= 60
    assert response["Retry-After"] == str(body["retry_after"])


def test_an_integration_past_its_rate_gets_429_with_retry_after(lead, agent, rates):
    rates(user="3/min")
    client = APIClient()
    client.force_authenticate(lead)
    for _ in range(3):
        assert client.get(CASES).status_code == 200
    _assert_throttled(client.get(CASES))
    other = APIClient()
    other.force_authenticate(agent)
    assert other.get(CASES).status_code == 200, "each user has a rate of their own"


def test_guessing_tokens_is_throttled_at_the_anonymous_rate(db, rates):
    rates(anon="3/min")
    client = APIClient()
    for n in range(3):
        client.credentials(HTTP_AUTHORIZATION=f"Token {n:040d}")
        assert client.get(CASES).status_code == 401
    _assert_throttled(client.get(CASES))


def test_a_forged_forwarded_for_header_does_not_dodge_the_anonymous_rate(db, rates):
    rates(anon="2/min")
    for n in range(2):
        APIClient().get(CASES, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")
    _assert_throttled(APIClient().get(CASES, HTTP_X_FORWARDED_FOR="203.0.113.99"))


def test_webhooks_have_their_own_rate(lead, rates):
    rates(hooks="2/min", user="100/min")
    hook = APIClient()
    for _ in range(2):
        answer = hook.post(HOOK, b"{}", content_type="application/json")
        assert answer.status_code == 401
        assert answer.json()["error"] == "bad_signature"
    _assert_throttled(hook.post(HOOK, b"{}", content_type="application/json"))
    api = APIClient()
    api.force_authenticate(lead)
    assert api.get(CASES).status_code == 200, "the webhook's scope is not the API's"


def test_the_lockout_page_links_back_to_the_login(lead):
    for _ in range(5):
        _login(Client(), "lead", "wrong")
    page = _login(Client(), "lead", "pw").content.decode()
    assert reverse("admin:login") in page
