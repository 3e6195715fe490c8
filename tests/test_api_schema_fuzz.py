"""Schemathesis against ``/api/schema/``: every operation, every check, stateful links.

The schema is loaded from the running app (WSGI, in this process, inside the test's database
transaction). Every operation is called as the integration's token (the demo's order intake,
an agent) and as an approver's token, and the stateful runs follow the schema's OpenAPI links
(an opened case's reference into reading, moving and cancelling it; a proposal's id into
approving it) as each of them. Each answer must conform to the schema: no server error, a
documented status code, content type, headers and body, valid data accepted, invalid data
refused, no ignored authentication, resources reachable where a link says they are.
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
from schemathesis.generation import GenerationMode

MAX_EXAMPLES = 25
# Stateful runs: scenarios and the calls in each (intake, then where its links lead).
STATEFUL_EXAMPLES = 15
STATEFUL_STEPS = 6


ROLES = ("integration", "approver")


@pytest.fixture
def demo_tokens(db):
    """The demo data (team Deliveries, case D-41) and an API token per role: the integration
    (order intake) and an approver."""
    call_command("load_demo", stdout=io.StringIO())
    users = get_user_model().objects.filter(username__in=ROLES, holdfast_teams__name="Deliveries")
    return {user.username: Token.objects.get_or_create(user=user)[0].key for user in users}


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


# The token of the role a test runs as (set by the test, read per request by ``TokenAuth``).
_TOKEN: dict[str, str] = {}


@schema.auth(refresh_interval=None)
class TokenAuth:
    """The test's token on every generated request, as schemathesis' own authentication (so
    its authentication checks know the request carried a real token and probe without it)."""

    def get(self, case, context):
        return _TOKEN.get("current")

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Token {data}"}


@schema.hook
def map_case(context, case):
    """A positive intake names the demo's account (a generated name would be refused as
    unknown, and the stateful runs would never reach an opened case and its links)."""
    meta = case.meta
    positive = meta is None or meta.generation.mode == GenerationMode.POSITIVE
    if case.operation.label == "POST /api/cases/" and positive and isinstance(case.body, dict):
        case.body = {**case.body, "account": "ACC-100"}
    return case


HYPOTHESIS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@HYPOTHESIS
def test_every_operation_conforms_to_its_schema_as_the_integration(case, demo_tokens):
    _TOKEN["current"] = demo_tokens["integration"]
    case.call_and_validate()


@schema.parametrize()
@HYPOTHESIS
def test_every_operation_conforms_to_its_schema_as_an_approver(case, demo_tokens):
    _TOKEN["current"] = demo_tokens["approver"]
    case.call_and_validate()


@pytest.mark.parametrize("role", ROLES)
def test_stateful_runs_following_the_links_conform(role, demo_tokens):
    _TOKEN["current"] = demo_tokens[role]

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        pass

    Workflow.run(
        settings=settings(
            HYPOTHESIS, max_examples=STATEFUL_EXAMPLES, stateful_step_count=STATEFUL_STEPS
        )
    )


def test_the_stateful_runs_follow_the_schemas_links():
    """Intake leads to reading, moving, cancelling the case and preparing its proposal; the
    approver's queue leads to approving and rejecting the first proposal."""
    steps = {name for name in dir(schema.as_state_machine()) if "__" in name}
    for expected in [
        "POST_api_cases___201_ReadCase__GET_api_cases_reference_",
        "POST_api_cases___201_MoveCase__POST_api_cases_reference_transitions_",
        "POST_api_cases___201_CancelCase__POST_api_cases_reference_cancel_",
        "POST_api_cases___201_PrepareProposal__POST_api_cases_reference_proposals_",
        "GET_api_proposals___200_ApproveProposal__POST_api_proposals_id_approve_",
        "GET_api_proposals___200_RejectProposal__POST_api_proposals_id_reject_",
    ]:
        assert expected in steps


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
