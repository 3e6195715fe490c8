"""Schemathesis against ``/api/schema/``: every operation, every check, bounded examples.

The schema is loaded from the running app (WSGI, in this process, inside the test's database
transaction) and every generated request carries a real token of the demo team's lead. Each
answer must conform to the schema: no server error, a documented status code, content type,
headers and body, valid data accepted, invalid data refused, no ignored authentication.
Examples are bounded and derandomized, so a run is repeatable and takes well under a minute.

This is the only module that imports schemathesis; the rest of the suite runs with
``-p no:schemathesis``.
"""

from __future__ import annotations

import io

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.config import SchemathesisConfig

MAX_EXAMPLES = 25


@pytest.fixture
def demo_lead_token(db, settings):
    """The demo data (team Deliveries, case D-41) and an API token of its lead."""
    call_command("load_demo", stdout=io.StringIO())
    lead = get_user_model().objects.get(username="lead", holdfast_teams__name="Deliveries")
    return Token.objects.get_or_create(user=lead)[0].key


@pytest.fixture(autouse=True)
def _needs_the_schemathesis_plugin(request):
    """``-p no:schemathesis`` (the fast way to run the other modules) skips this one."""
    if not request.config.pluginmanager.has_plugin("schemathesis"):
        pytest.skip("the schemathesis pytest plugin is disabled (-p no:schemathesis)")


@pytest.fixture(autouse=True)
def _requests_keep_the_test_connection():
    """As Django's own test client does: a request must not close the connection that holds
    the test's transaction (PostgreSQL would lose it after the first request)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def _unthrottled(settings):
    """Hundreds of requests in seconds: the throttles are tested in test_throttling."""
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": dict.fromkeys(rates, "100000/min"),
    }
    caches["throttle"].clear()
    yield
    caches["throttle"].clear()


# Loaded at collection from the app itself (the schema view reads no database rows).
# ``schemathesis.pytest.from_fixture`` would load it per test, but fails on pytest 9.
schema = schemathesis.openapi.from_wsgi(
    "/api/schema/?format=json",
    get_wsgi_application(),
    config=SchemathesisConfig.from_dict(
        {
            "checks": {
                # A well-formed request may still name an account that does not exist, a date
                # in the past or a key with a control character: rules the schema cannot
                # state. Those are refused with 400 and the field named, never a 5xx.
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "429"]
                },
            }
        }
    ),
)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_conforms_to_its_schema(case, demo_lead_token):
    case.call_and_validate(headers={"Authorization": f"Token {demo_lead_token}"})


def test_the_run_covers_every_operation_with_every_check():
    from schemathesis.checks import CHECKS, load_all_checks

    load_all_checks()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {
        "GET /api/cases/",
        "POST /api/cases/",
        "POST /api/cases/{reference}/transitions/",
        "POST /api/proposals/{id}/approve/",
        "POST /api/hooks/orders/",
    }
    names = {check.__name__ for check in CHECKS.get_all() if not isinstance(check, type)}
    for op in operations:
        config = schema.config.checks_config_for(operation=op, phase=None)
        assert {n for n in names if not config.get_by_name(name=n).enabled} == set(), op.label
