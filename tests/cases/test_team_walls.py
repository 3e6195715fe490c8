"""Team walls: a user of another team learns nothing of this team's orders, cases and events.

Anyone may open a case on any order id, so an order id proves nothing about whose order it is.
The order system's ``GET /orders/{id}`` names the order's account: a source check refuses an
order of another account without naming that account, and an inbound event (whose webhook
carries no account) reaches only open cases whose ``account.reference`` is the account the
order system reports when the event is processed. The admin shows an event only to teams with
a case of that account on that order.

``test_permission_matrix_*`` walks every admin and API URL (generated from the admin registry
and the URL resolver, so a new URL is walked without touching this file) as each role of team
A, a lead of team B and an anonymous caller, GET and POST where the URL takes POSTs, and
writes the matrix to ``var/permission-matrix.txt`` (and to stdout with ``pytest -s``).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from django.urls import URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token, TokenProxy
from rest_framework.test import APIClient

from approvals.models import Proposal
from approvals.services import proposal_approve, proposal_prepare
from cases.actions import _REGISTRY as CASE_ACTIONS
from cases.kernel import SYSTEM, Worker, apply_transition, lock_case
from cases.live import QUEUES
from cases.models import (
    AttentionCase,
    Case,
    CaseEvent,
    CustomerAccount,
    EvidenceReference,
    FollowUpPolicy,
    HeldCase,
    Notification,
    StaffProfile,
    Status,
    Team,
)
from lab.models import DrillRun
from reconciliation.claims import case_authorize_apply, case_claim
from reconciliation.client import OrderSystemClient
from reconciliation.inbound import inbound_event_process, inbound_event_receive
from reconciliation.models import InboundEvent
from reconciliation.sources import source_check

ORDER = "ORD-7731"
TIMEOUTS = {"connect": 1.0, "read": 1.0, "write": 1.0, "pool": 1.0}
EVENT_ID = "evt-team-a-7731"


# --- the order system, as an httpx mock transport ---------------------------------------------


def order_source(*, account_id: str = "ACC-100", version: int = 1) -> OrderSystemClient:
    """An order system that says every order belongs to ``account_id``."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/orders/"):
            return httpx.Response(
                200,
                json={
                    "order_id": request.url.path.rsplit("/", 1)[-1],
                    "account_id": account_id,
                    "status": "open",
                    "delivery_date": str(timezone.localdate() + dt.timedelta(days=3)),
                    "version": version,
                },
            )
        return httpx.Response(404, json={"error": "not_found", "detail": "no such path"})

    return OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
    )


def unreachable_source() -> OrderSystemClient:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    return OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
    )


@pytest.fixture
def order_owner(monkeypatch):
    """Inbound processing reads orders from a mock order system naming ``owner.account``
    (``owner.reachable = False`` makes it refuse connections)."""
    owner = SimpleNamespace(account="ACC-100", version=1, reachable=True)

    def client() -> OrderSystemClient:
        if not owner.reachable:
            return unreachable_source()
        return order_source(account_id=owner.account, version=owner.version)

    monkeypatch.setattr("reconciliation.inbound.order_system_client", client, raising=False)
    return owner


def receive_event(event_id: str, version: int, *, order_id: str = ORDER, **extra) -> InboundEvent:
    body = {
        "event_id": event_id,
        "type": "order.updated",
        "order_id": order_id,
        "order_version": version,
        "occurred_at": "2026-03-02T09:15:00Z",
        **extra,
    }
    receipt = inbound_event_receive(
        event_id=event_id,
        type="order.updated",
        order_id=order_id,
        order_version=version,
        occurred_at=dt.datetime(2026, 3, 2, 9, 15, tzinfo=dt.UTC),
        body=body,
    )
    return receipt.event


def checked(case: Case, *, account_id: str = "ACC-100") -> str:
    with order_source(account_id=account_id) as client:
        return source_check(case_id=case.pk, client=client)


def reload(case: Case) -> Case:
    return Case.objects.get(pk=case.pk)


@pytest.fixture(autouse=True)
def _team_b_backup(make_user, other_team):
    """Team B names a backup (a case page without one fails to render: see the report)."""
    other_team.default_backup = make_user("b-backup", "lead", teams=[other_team])
    other_team.save()


# --- the wrong account's order -----------------------------------------------------------------


def test_source_check_refuses_another_accounts_order_without_naming_its_account(
    make_case, other_account, outsider, api
):
    make_case()  # team A's own case on the order
    intruder = make_case(account=other_account, request_key="b-1")

    assert checked(intruder) == "needs_attention"

    intruder = reload(intruder)
    assert intruder.status == Status.NEEDS_ATTENTION
    assert ORDER in intruder.last_error
    assert "ACC-200" in intruder.last_error
    texts = [intruder.last_error, intruder.waiting_reason]
    texts += [f"{e.reason} {e.detail}" for e in CaseEvent.objects.filter(case=intruder)]
    assert not [text for text in texts if "ACC-100" in text]
    body = api(outsider).get(f"/api/cases/{intruder.reference}/").content.decode()
    assert "ACC-100" not in body
    client = Client()
    client.force_login(outsider)
    for url in (
        reverse("admin:cases_case_change", args=[intruder.pk]),
        reverse("admin:cases_attentioncase_changelist"),
    ):
        page = client.get(url)
        assert page.status_code == 200
        assert "ACC-100" not in page.content.decode(), url


# --- inbound events reach only the order's own account ----------------------------------------


def test_inbound_event_reaches_only_open_cases_of_the_orders_account(
    make_case, other_account, order_owner
):
    own = make_case()
    intruder = make_case(account=other_account, request_key="b-1")
    intruder_version = reload(intruder).version

    receive_event("evt-1", 3)
    assert inbound_event_process(event_id="evt-1") == "processed"

    event = InboundEvent.objects.get(event_id="evt-1")
    assert event.account_reference == "ACC-100"
    assert event.account == own.account  # ours of that reference: who may see the event
    assert EvidenceReference.objects.filter(case=own, external_reference="event:evt-1").exists()
    assert not EvidenceReference.objects.filter(case=intruder).exists()
    assert reload(intruder).version == intruder_version
    assert intruder.reference not in event.outcome
    assert own.reference in event.outcome


def test_inbound_event_account_comes_from_the_order_system_not_the_webhook(
    make_case, other_account, order_owner
):
    own = make_case()
    intruder = make_case(account=other_account, request_key="b-1")

    # A body claiming another account changes nothing: only the order system's answer counts.
    receive_event("evt-1", 3, account_id="ACC-200")
    inbound_event_process(event_id="evt-1")

    assert not EvidenceReference.objects.filter(case=intruder).exists()
    assert EvidenceReference.objects.filter(case=own).count() == 1


def test_inbound_event_whose_order_cannot_be_read_fails_and_changes_nothing(
    make_case, other_account, order_owner
):
    own = make_case()
    intruder = make_case(account=other_account, request_key="b-1")
    versions = (reload(own).version, reload(intruder).version)
    order_owner.reachable = False

    receive_event("evt-1", 3)
    assert inbound_event_process(event_id="evt-1") == "failed"

    event = InboundEvent.objects.get(event_id="evt-1")
    assert (event.processing, event.attempts, event.account_reference) == ("failed", 1, "")
    assert event.account is None
    assert event.next_attempt_at is not None
    assert not EvidenceReference.objects.filter(case__in=[own, intruder]).exists()
    assert (reload(own).version, reload(intruder).version) == versions

    order_owner.reachable = True
    assert inbound_event_process(event_id="evt-1") == "processed"
    assert EvidenceReference.objects.filter(case=own).count() == 1
    assert not EvidenceReference.objects.filter(case=intruder).exists()


def test_inbound_events_admin_shows_an_event_only_to_teams_of_the_orders_account(
    make_case, other_account, order_owner, lead, outsider, django_user_model
):
    make_case()
    make_case(account=other_account, request_key="b-1")
    receive_event("evt-1", 3)
    inbound_event_process(event_id="evt-1")
    receive_event("evt-unread", 4)  # not processed yet: its account is unknown
    superuser = django_user_model.objects.create_superuser("root", password="pw")

    def listed(user) -> set[str]:
        client = Client()
        client.force_login(user)
        response = client.get(reverse("admin:reconciliation_inboundevent_changelist"))
        assert response.status_code == 200
        return {event.event_id for event in response.context["cl"].result_list}

    assert listed(lead) == {"evt-1"}
    assert listed(outsider) == set()
    assert listed(superuser) == {"evt-1", "evt-unread"}


# --- the permission matrix ---------------------------------------------------------------------

ROLES = ("lead", "backup", "agent", "approver", "auditor", "B-lead", "anonymous")
TEAM_A_ROLES = ROLES[:5]
MISSING = "999999"
# Records of the deployment itself, no team's data: every lead may read them (the leak check
# still applies to what they show).
DEPLOYMENT_MODELS = (DrillRun, FollowUpPolicy)
# One person's own records (their notifications): the rest of their team gets a 404 too.
PERSONAL_MODELS = {Notification: "lead"}


@pytest.fixture
def walls(
    make_case,
    lead,
    backup,
    agent,
    approver,
    auditor,
    outsider,
    other_account,
    account,
    team,
    order_owner,
):
    """Team A (Deliveries, ACC-100) with a case applying, one held and one needing attention,
    its proposals, approvals, operations, attempts, evidence and an inbound event; team B
    (Returns, ACC-200) with a case on team A's order ORD-7731."""
    worker = Worker("walls-worker")

    def ready(**overrides) -> Case:
        case = make_case(**overrides)
        assert checked(case) == "checked"
        proposal = proposal_prepare(case=reload(case), actor=agent)
        proposal_approve(proposal=proposal, actor=approver)
        case = reload(case)
        assert case.status == Status.READY
        return case

    applying = ready(note="TEAM-A-PRIVATE-NOTE", request_key="team-a-secret-1")
    # Never probed, so review-only: a lead starts the apply, then a worker claims it.
    case_authorize_apply(case=applying, actor=lead, expected_version=applying.version)
    attempt = case_claim(case_id=applying.pk, worker=worker)
    held = ready(request_key="team-a-secret-2")
    with transaction.atomic():
        apply_transition(lock_case(held.pk), "hold", actor=SYSTEM, reason="effect unknown")
    attention = make_case(request_key="team-a-secret-3")
    with transaction.atomic():
        apply_transition(
            lock_case(attention.pk), "escalate", actor=SYSTEM, reason="TEAM-A-ESCALATION"
        )
    intruder = make_case(account=other_account, request_key="team-b-1")
    assert checked(intruder) == "needs_attention"
    order_owner.version = 5
    receive_event(EVENT_ID, 5)
    assert inbound_event_process(event_id=EVENT_ID) == "processed"
    assert EvidenceReference.objects.filter(
        case=reload(applying), external_reference=f"event:{EVENT_ID}"
    ).exists()
    profile = StaffProfile.objects.create(user=lead)
    token = Token.objects.create(user=agent)

    proposals = Proposal.objects.filter(case__in=[applying, held])
    operations = [p.operation for p in proposals]
    approvals = [a for p in proposals for a in p.approvals.all()]
    cases = [applying, held, attention]
    markers = [
        "ACC-100",
        "Northwind",
        "TEAM-A-PRIVATE-NOTE",
        "TEAM-A-ESCALATION",
        "team-a-secret",
        EVENT_ID,
        "Lena",
        attempt.reference,
        *(case.reference for case in cases),
        *(operation.key for operation in operations),
        *(approval.reference for approval in approvals),
    ]
    objects = {
        Case: applying,
        HeldCase: HeldCase.objects.get(pk=held.pk),
        AttentionCase: AttentionCase.objects.get(pk=attention.pk),
        CaseEvent: CaseEvent.objects.filter(case=applying).first(),
        CustomerAccount: account,
        Team: team,
        StaffProfile: profile,
        Proposal: proposals.get(case=applying),
        InboundEvent: InboundEvent.objects.get(event_id=EVENT_ID),
        type(lead): lead,
        Group: Group.objects.get(name="lead"),
        TokenProxy: TokenProxy.objects.get(pk=token.pk),
        # A record of a past drill: the deployment's, on sandbox orders, no team's data.
        # The held case told its responsible person, the lead.
        Notification: Notification.objects.get(recipient=lead, case=held, kind="held"),
        FollowUpPolicy: FollowUpPolicy.objects.create(reason="held", minutes=30),
        DrillRun: DrillRun.objects.create(
            started_at=timezone.now(),
            finished_at=timezone.now(),
            passed=1,
            results=[{"name": "two_workers_claiming", "outcome": "PASS"}],
        ),
    }
    return SimpleNamespace(
        users={
            "lead": lead,
            "backup": backup,
            "agent": agent,
            "approver": approver,
            "auditor": auditor,
            "B-lead": outsider,
            "anonymous": None,
        },
        objects=objects,
        case=applying,
        intruder=intruder,
        markers=markers,
    )


@dataclass
class Target:
    """One concrete request of the walk."""

    label: str  # the route with its parameters named, e.g. admin/cases/case/<object_id>/change/
    path: str
    missing_path: str | None  # the same URL naming an object that does not exist
    methods: tuple[str, ...]
    api: bool
    names_object: bool
    model: type | None = None


@dataclass
class Route:
    pattern: str
    name: str | None
    callback: object
    params: list[str] = field(default_factory=list)


def _params(pattern) -> list[str]:
    converters = getattr(pattern, "converters", None)
    if converters:
        return list(converters)
    regex = getattr(pattern, "regex", None)
    return list(regex.groupindex) if regex is not None else []


def _walk(patterns, prefix: str = "", namespace: str | None = None, params=()):
    for entry in patterns:
        here = [*params, *_params(entry.pattern)]
        if isinstance(entry, URLResolver):
            ns = namespace
            if entry.namespace:
                ns = f"{namespace}:{entry.namespace}" if namespace else entry.namespace
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern), ns, here)
        else:
            name = entry.name and (f"{namespace}:{entry.name}" if namespace else entry.name)
            yield Route(prefix + str(entry.pattern), name, entry.callback, here)


def _model_admin(callback) -> admin.ModelAdmin | None:
    found = getattr(callback, "model_admin", None)
    if found is not None:
        return found
    view = callback
    while view is not None:  # admin_view() and decorators wrap the bound view method
        owner = getattr(view, "__self__", None)
        if isinstance(owner, admin.ModelAdmin):
            return owner
        view = getattr(view, "__wrapped__", None)
    return None


def _api_model(route: Route):
    name = (route.name or "").split(":")[-1]
    if name.startswith("case-"):
        return Case
    if name.startswith("proposal-"):
        return Proposal
    return None


def _methods(route: Route, model_admin) -> tuple[str, ...]:
    actions = getattr(route.callback, "actions", None)
    if actions is not None:  # a DRF viewset route
        return tuple(m.upper() for m in ("get", "post") if m in actions)
    cls = getattr(route.callback, "cls", None) or getattr(route.callback, "view_class", None)
    if cls is not None and hasattr(cls, "http_method_names") and route.pattern.startswith("api/"):
        return tuple(m.upper() for m in ("get", "post") if hasattr(cls, m))
    if model_admin is not None and not route.pattern.endswith("history/"):
        return ("GET", "POST")
    return ("GET",)


def _targets(walls) -> list[Target]:
    """Every named URL of the project, its parameters filled with team A's objects."""
    targets: list[Target] = []
    unknown: list[str] = []
    for route in _walk(get_resolver().url_patterns):
        if route.name is None and route.params:
            continue  # the admin's catch-all: every real URL is walked by name
        if route.name == "admin:view_on_site":
            ct = ContentType.objects.get_for_model(Case).pk
            case = walls.case.pk
            targets.append(
                Target(
                    "admin/r/<content_type_id>/<object_id>/",
                    reverse(route.name, args=[ct, case]),
                    reverse(route.name, args=[ct, MISSING]),
                    ("GET",),
                    False,
                    True,
                    None,  # Case has no get_absolute_url: a 404 for everyone
                )
            )
            continue
        model_admin = _model_admin(route.callback)
        model = model_admin.model if model_admin is not None else _api_model(route)
        obj = walls.objects.get(model) if model is not None else None
        methods = _methods(route, model_admin)
        api = route.pattern.startswith("api/")
        variants: list[tuple[dict, dict | None]] = [({}, None)]
        names_object = False
        for param in route.params:
            grown = []
            for kwargs, missing in variants:
                if param in {"object_id", "pk", "id"} and model is not None:
                    names_object = True
                    value = str(obj.pk) if obj is not None else MISSING
                    grown.append(
                        ({**kwargs, param: value}, {**(missing or kwargs), param: MISSING})
                    )
                elif param == "reference":
                    names_object = True
                    grown.append(
                        (
                            {**kwargs, param: walls.case.reference},
                            {**(missing or kwargs), param: f"D-{MISSING}"},
                        )
                    )
                elif param == "name" and route.name == "live-queue":
                    grown += [({**kwargs, param: q}, missing) for q in QUEUES]
                elif param == "name" and model is Case:
                    for action in CASE_ACTIONS.values():
                        if action.execute is not None:
                            grown.append(
                                (
                                    {**kwargs, param: action.name},
                                    missing and {**missing, param: action.name},
                                )
                            )
                elif param == "format":
                    grown.append(
                        ({**kwargs, param: "json"}, missing and {**missing, param: "json"})
                    )
                elif param == "app_label":
                    labels = sorted({m._meta.app_label for m in admin.site._registry})
                    grown += [({**kwargs, param: label}, missing) for label in labels]
                else:
                    unknown.append(f"{route.name}: {param}")
            variants = grown
        for kwargs, missing in variants:
            if (
                names_object
                and missing is not None
                and any(
                    missing.get(p) != kwargs.get(p) for p in ("pk", "id", "object_id", "reference")
                )
            ):
                missing_path = reverse(route.name, kwargs={**kwargs, **missing})
            else:
                missing_path = None
            path = reverse(route.name, kwargs=kwargs) if route.name else "/" + route.pattern
            label = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", route.pattern)
            label = label.replace("^", "").replace("$", "")
            extra = [f"{k}={v}" for k, v in kwargs.items() if k in {"name", "app_label"}]
            if extra:
                label += " [" + ", ".join(extra) + "]"
            targets.append(Target(label, path, missing_path, methods, api, names_object, model))
    assert not unknown, f"URL parameters the walk cannot fill yet: {unknown}"
    return targets


def _clients(user) -> tuple[Client, APIClient]:
    """A logged-in admin client and an authenticated API client (anonymous for None)."""
    browser = Client(raise_request_exception=False)
    api = APIClient(raise_request_exception=False)
    if user is not None:
        browser.force_login(user)
        api.force_authenticate(user=user)
    return browser, api


def _request(clients: tuple[Client, APIClient], target_path: str, method: str, api: bool):
    cache.clear()  # throttles count requests in the cache; the walk is not a flood
    browser, api_client = clients
    # Each request is undone afterwards, so the walk's order never matters.
    with transaction.atomic():
        if method == "POST" and api:
            response = api_client.post(target_path, {}, format="json")
        elif method == "POST":
            response = browser.post(target_path, {})
        else:
            response = (api_client if api else browser).get(target_path)
        transaction.set_rollback(True)
    return response


def _cell(response) -> str:
    if response.status_code in {301, 302}:
        location = response.get("Location", "")
        if "/login/" in location:
            return f"{response.status_code}>login"
        if location.rstrip("/").endswith("/admin") or location == "/admin/":
            return f"{response.status_code}>index"
        return str(response.status_code)
    return str(response.status_code)


def _leaks(response, markers: list[str], target_path: str) -> list[str]:
    body = response.content.decode("utf-8", "replace")
    found = []
    for marker in markers:
        if marker in target_path:
            continue  # an answer may repeat what was asked for
        if re.search(rf"(?<![\w]){re.escape(marker)}(?!\d)", body):
            found.append(marker)
    return found


def _sees_model(user, model) -> bool:
    if model is None:
        return True
    opts = model._meta
    return any(
        user.has_perm(f"{opts.app_label}.{action}_{opts.model_name}")
        for action in ("view", "change")
    )


def _schema_paths(user) -> set[str]:
    client = APIClient()
    client.force_authenticate(user=user)
    schema = client.get("/api/schema/", {"format": "json"}).json()
    return set(schema["paths"])


def test_permission_matrix_every_admin_and_api_url_by_role(walls, capsys):
    targets = _targets(walls)
    walked = {t.label for t in targets}
    # The walk covers every registered ModelAdmin and every path in the OpenAPI schema.
    for model in admin.site._registry:
        opts = model._meta
        assert f"admin/{opts.app_label}/{opts.model_name}/" in walked, opts.label
    concrete = {
        "{reference}": walls.case.reference,
        "{id}": str(walls.objects[Proposal].pk),
        "{pk}": str(walls.objects[Proposal].pk),
    }
    paths = {t.path for t in targets}
    uncovered = set()
    for path in _schema_paths(walls.users["lead"]):
        filled = re.sub(r"\{\w+\}", lambda m: concrete.get(m.group(0), m.group(0)), path)
        if filled not in paths:
            uncovered.add(path)
    assert not uncovered, f"schema paths the walk missed: {uncovered}"

    clients = {role: _clients(user) for role, user in walls.users.items()}
    rows: list[tuple[str, list[str]]] = []
    failures: list[str] = []
    for target in targets:
        for method in target.methods:
            cells = []
            missing_answer = {}
            if target.missing_path is not None:
                asked = ROLES[:-1] if target.model in PERSONAL_MODELS else ("B-lead",)
                for role in asked:
                    answer = _request(clients[role], target.missing_path, method, target.api)
                    missing_answer[role] = (answer.status_code, answer.get("Location"))
            for role in ROLES:
                response = _request(clients[role], target.path, method, target.api)
                status = response.status_code
                cells.append(_cell(response))
                where = f"{method} {target.path} as {role}: {status}"
                # A readiness probe answers 503 by design while no worker runs (none does here).
                not_ready = target.path == "/readyz" and status == 503
                if status >= 500 and not not_ready:
                    failures.append(f"{where} (server error)")
                    continue
                owner = PERSONAL_MODELS.get(target.model) if target.names_object else None
                if role in TEAM_A_ROLES and (owner is None or role == owner):
                    if status == 404 and target.names_object and target.model is not None:
                        failures.append(f"{where}: team A's own object not found")
                    continue
                documentation = target.label.startswith(("api/schema", "api/docs"))
                leaks = [] if documentation else _leaks(response, walls.markers, target.path)
                if leaks:
                    failures.append(f"{where}: shows team A's {leaks}")
                if role == "anonymous":
                    if target.label in {"admin/login/", "admin/logout/"}:
                        ok = status in {200, 302, 405}
                    elif target.label.startswith("admin/live/"):
                        ok = status == 401
                    elif target.label.startswith("admin/"):
                        ok = status == 302 and "/admin/login/" in response.get("Location", "")
                    elif target.api and not target.label.startswith(("api/schema", "api/docs")):
                        ok = status == 401
                    elif target.path in {"/healthz", "/readyz"}:
                        ok = status in {200, 503}  # probes answer anyone, with no case data
                    else:
                        ok = status in {200, 302}
                    if not ok:
                        failures.append(f"{where}: anonymous must be sent to log in")
                    continue
                # Team B's lead (and for one person's own records, everybody else): an object
                # of team A is answered exactly like a missing one.
                if target.names_object and target.model not in DEPLOYMENT_MODELS:
                    # The API and the live JSON say 404; Django's admin pages may redirect to
                    # the index ("does not exist"), exactly as for a missing id (checked below).
                    strict = target.api or "live" in target.label
                    allowed = {404} if strict else {302, 403, 404}
                    if status not in allowed:
                        failures.append(f"{where}: another team's object must be a 404")
                    if target.missing_path is not None:
                        same = (status, response.get("Location")) == missing_answer[role]
                        # Django's own pages for a model the user may not see at all (users,
                        # groups, tokens) refuse an existing id with a 403: no data, only that
                        # the id exists, and never of a team-scoped model.
                        if status == 403 and not _sees_model(walls.users[role], target.model):
                            same = True
                        if not same:
                            failures.append(
                                f"{where}: differs from a missing object {missing_answer[role]}"
                            )
            rows.append((f"{method:4} {target.label}", cells))

    width = max(len(label) for label, _ in rows)
    lines = [
        "Permission matrix: team A's objects (Deliveries, ACC-100) by role; team B's lead "
        "has a case on team A's order.",
        "cells: HTTP status; 302>login = sent to log in; 302>index = Django admin's "
        "'does not exist' redirect (identical for a missing id)",
        f"{'request':{width}}  " + "  ".join(f"{r:>9}" for r in ROLES),
    ]
    lines += [f"{label:{width}}  " + "  ".join(f"{c:>9}" for c in cells) for label, cells in rows]
    lines.append(
        f"{len(rows)} requests x {len(ROLES)} roles = {len(rows) * len(ROLES)} answers; "
        f"{len(failures)} failures"
    )
    table = "\n".join(lines)
    out = Path(settings.BASE_DIR) / "var" / "permission-matrix.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text(table + "\n\n" + "\n".join(failures) + "\n")
    with capsys.disabled():
        print("\n" + table)
    assert not failures, "\n".join(failures)
