"""Inbound order events: signed receipts stored once by event id, processing tracked apart.

Webhooks arrive at least once, in any order, and are resent by hand. These tests post raw
signed bytes to ``/api/hooks/orders/`` the way the reference order system does
(``orders/outbox.py``) and check what is stored, what is processed, and what cases do.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import json
import re
import time
import types

import httpx
import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from approvals.models import Approval, Operation, Proposal
from approvals.services import live_approval, proposal_approve, proposal_prepare
from cases import kinds
from cases.codes import Action
from cases.kernel import SYSTEM, apply_transition, lock_case
from cases.models import Case, CaseEvent, EvidenceReference, Status
from reconciliation import inbound, webhooks
from reconciliation.client import OrderSystemClient
from reconciliation.models import InboundEvent
from reconciliation.sources import source_check
from reconciliation.tasks_inbound import process_event, retry_failed_events
from tests.support.fixtures import date_change
from tests.support.order_system import (
    DEFAULT_GRANT_KEY,
    DEFAULT_WEBHOOK_SECRET,
    WEBHOOK_SIGNATURE_HEADER,
    webhook_headers,
)

URL = "/api/hooks/orders/"
ORDER = "ORD-7731"
TIMEOUTS = {"connect": 1.0, "read": 2.0, "write": 2.0, "pool": 1.0}


@pytest.fixture(autouse=True)
def _holdfast_settings(settings):
    settings.ORDER_WEBHOOK_SECRET = DEFAULT_WEBHOOK_SECRET
    settings.APPROVAL_GRANT_KEY = DEFAULT_GRANT_KEY


@pytest.fixture(autouse=True)
def _order_account(request, monkeypatch):
    """Processing reads the order's account from the order system (team walls): here a mock
    that says ACC-100 owns every order; tests with the real order system read it there."""
    if request.node.get_closest_marker("order_system") is None:
        monkeypatch.setattr(inbound, "order_system_client", lambda: mock_source(version=1))


@pytest.fixture
def enqueued(monkeypatch) -> list[tuple]:
    """Work handed to django-q2, recorded instead of queued."""
    calls: list[tuple] = []
    monkeypatch.setattr("cases.scheduling.enqueue", lambda func, *args: calls.append((func, *args)))
    return calls


@pytest.fixture
def run_queued(enqueued, django_capture_on_commit_callbacks):
    """Run the processing tasks queued so far, as a django-q2 worker would (their own
    on-commit work is recorded in ``enqueued``); returns their results."""

    def run() -> list[str]:
        queued = [args[0] for func, *args in enqueued if func == inbound.PROCESS_TASK]
        enqueued[:] = [call for call in enqueued if call[0] != inbound.PROCESS_TASK]
        with django_capture_on_commit_callbacks(execute=True):
            return [process_event(pk) for pk in queued]

    return run


@pytest.fixture
def deliver(db, run_queued, django_capture_on_commit_callbacks):
    """POST one event as the order system does; returns the response. ``run=True`` then runs
    the processing tasks the delivery queued (as a django-q2 worker would)."""

    def post(body: bytes, *, signature: str | None = None, run: bool = True, **headers):
        """Signed now unless ``signature`` is given; ``X-Orders-Timestamp`` is the signed one
        (``HTTP_X_ORDERS_TIMESTAMP=`` overrides it)."""
        if signature is None:
            signature = sign(body)
        extra = {"HTTP_X_ORDERS_SIGNATURE": signature} if signature else {}
        if signed_at := re.match(r"t=(\d+),", signature):
            extra["HTTP_X_ORDERS_TIMESTAMP"] = signed_at.group(1)
        with contextlib.suppress(ValueError, KeyError):
            extra["HTTP_X_ORDERS_EVENT_ID"] = json.loads(body)["event_id"]
        extra.update(headers)
        with django_capture_on_commit_callbacks(execute=True):
            response = Client().post(URL, data=body, content_type="application/json", **extra)
        if run:
            run_queued()
        return response

    return post


def event_bytes(event_id: str, order_version: int, *, order_id: str = ORDER, **fields) -> bytes:
    payload = {
        "event_id": event_id,
        "type": "order.updated",
        "order_id": order_id,
        "order_version": order_version,
        "occurred_at": "2026-03-02T09:15:00Z",
        **fields,
    }
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def sign(body: bytes, secret: str = DEFAULT_WEBHOOK_SECRET, *, at: int | None = None) -> str:
    """``X-Orders-Signature`` as the order system sends it, signed at ``at`` (default now)."""
    return webhook_headers(body, secret=secret, at=at)[WEBHOOK_SIGNATURE_HEADER]


def reload(case: Case) -> Case:
    return Case.objects.get(pk=case.pk)


def event_evidence(case: Case):
    return EvidenceReference.objects.filter(case=case, kind="order_event")


# --- a case taken to 'ready' through the services, reading the order from a mock source -------


def mock_source(*, version: int, account_id: str = "ACC-100") -> OrderSystemClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/orders/"):
            delivery = timezone.localdate() + dt.timedelta(days=3)
            return httpx.Response(
                200,
                json={
                    "order_id": request.url.path.rsplit("/", 1)[-1],
                    "account_id": account_id,
                    "status": "open",
                    "delivery_date": str(delivery),
                    "version": version,
                },
            )
        return httpx.Response(404, json={"error": "not_found", "detail": "no such path"})

    return OrderSystemClient(
        "http://orders.test", timeouts=TIMEOUTS, transport=httpx.MockTransport(handler)
    )


@pytest.fixture
def ready_case(make_case, agent, approver):
    """Order read at version 1, proposal prepared by the agent, approved by the approver."""

    def make(**overrides) -> tuple[Case, Proposal, Approval]:
        case = make_case(**overrides)
        with mock_source(version=1) as client:
            assert source_check(case_id=case.pk, client=client) == "checked"
        proposal = proposal_prepare(case=reload(case), actor=agent)
        approval = proposal_approve(proposal=proposal, actor=approver)
        case = reload(case)
        assert case.status == Status.READY
        assert case.last_checked_order_version == 1
        return case, proposal, approval

    return make


# --- receipt --------------------------------------------------------------------------------


def test_bad_or_missing_signature_is_refused_and_nothing_is_stored(deliver, enqueued):
    body = event_bytes("evt-1", 2)

    answers = [
        deliver(body, signature="sha256=" + "0" * 64),
        deliver(body, signature=sign(body, secret="someone-elses-secret")),
        deliver(body, signature=""),
        deliver(body + b" ", signature=sign(body)),  # the bytes signed are not the bytes sent
    ]

    for response in answers:
        assert response.status_code == 401
        assert response.json()["error"] == "bad_signature"
        assert response.json()["detail"]
    assert InboundEvent.objects.count() == 0
    assert enqueued == []


def test_a_signature_without_a_timestamp_is_refused(deliver, enqueued):
    """Before: ``sha256=<HMAC of the body>`` alone was accepted, so a delivery captured once
    could be replayed for ever (issue 25)."""
    body = event_bytes("evt-1", 2)
    body_only = (
        "sha256=" + hmac.new(DEFAULT_WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    )

    response = deliver(body, signature=body_only)

    assert response.status_code == 401
    assert response.json()["error"] == "bad_signature"
    assert response.json()["reason"] == "signature"
    assert "t=<unix seconds>,sha256=<hex>" in response.json()["detail"]
    assert InboundEvent.objects.count() == 0
    assert enqueued == []


def test_an_event_dated_2019_with_a_fresh_id_and_its_old_signed_timestamp_is_refused(
    deliver, enqueued
):
    """A captured 2019 delivery, its body given a fresh event id, its signature as it was
    made then: the HMAC is the shared secret's, the timestamp is years outside the window."""
    body = event_bytes("evt-fresh-2019", 2, occurred_at="2019-06-01T10:00:00Z")

    response = deliver(body, signature=sign(body, at=1_559_383_200))  # 2019-06-01T10:00:00Z

    assert response.status_code == 401
    assert response.json()["error"] == "bad_signature"
    assert response.json()["reason"] == "timestamp"
    assert "1559383200" in response.json()["detail"]
    assert "ORDER_WEBHOOK_TOLERANCE_SECONDS" in response.json()["detail"]
    assert InboundEvent.objects.count() == 0
    assert enqueued == []


@pytest.mark.parametrize(
    ("skew", "accepted"),
    [(-299, True), (299, True), (-301, False), (301, False), (0, True)],
)
def test_the_signed_timestamp_must_be_within_the_tolerance_either_way(
    deliver, monkeypatch, skew, accepted
):
    """The server's clock is pinned: signed at ``int(time.time()) + 301`` and read a moment
    later, the skew could fall to 300 when the second turned between the two (CI saw it)."""
    now = 1_780_000_000.5
    monkeypatch.setattr(webhooks, "time", types.SimpleNamespace(time=lambda: now))
    body = event_bytes("evt-1", 2)

    response = deliver(body, signature=sign(body, at=int(now) + skew), run=False)

    assert response.status_code == (202 if accepted else 401), response.json()
    assert InboundEvent.objects.exists() is accepted


def test_the_tolerance_comes_from_the_settings(deliver, settings):
    settings.ORDER_WEBHOOK_TOLERANCE_SECONDS = 30
    body = event_bytes("evt-1", 2)

    late = deliver(body, signature=sign(body, at=int(time.time()) - 60), run=False)
    fresh = deliver(body, signature=sign(body, at=int(time.time()) - 10), run=False)

    assert late.status_code == 401
    assert "30" in late.json()["detail"]
    assert fresh.status_code == 202


def test_a_timestamp_header_that_is_not_the_signed_one_is_refused(deliver):
    body = event_bytes("evt-1", 2)
    now = int(time.time())

    response = deliver(body, signature=sign(body, at=now), HTTP_X_ORDERS_TIMESTAMP=str(now - 1))

    assert response.status_code == 401
    assert response.json()["reason"] == "signature"
    assert "X-Orders-Timestamp" in response.json()["detail"]


def test_a_signature_moved_to_another_timestamp_does_not_verify(deliver):
    """The timestamp is signed: rewriting it to now (to pass the window) breaks the HMAC."""
    body = event_bytes("evt-1", 2)
    old = sign(body, at=1_559_383_200)
    now = str(int(time.time()))
    moved = old.replace("t=1559383200", f"t={now}")

    response = deliver(body, signature=moved)

    assert response.status_code == 401
    assert response.json()["reason"] == "signature"
    assert "does not match" in response.json()["detail"]


def test_new_event_is_stored_pending_and_queued_after_commit(deliver, enqueued):
    response = deliver(event_bytes("evt-1", 2), run=False)

    assert response.status_code == 202
    assert response.json() == {"event_id": "evt-1", "status": "stored", "processing": "pending"}
    event = InboundEvent.objects.get()
    assert (event.order_id, event.order_version, event.type) == (ORDER, 2, "order.updated")
    assert event.occurred_at == dt.datetime(2026, 3, 2, 9, 15, tzinfo=dt.UTC)
    assert event.body["event_id"] == "evt-1"
    assert (event.processing, event.deliveries, event.attempts) == ("pending", 1, 0)
    assert enqueued == [(inbound.PROCESS_TASK, event.pk)]


def test_malformed_or_incomplete_event_is_invalid_and_not_stored(deliver):
    not_json = b"{not json"
    missing = json.dumps({"event_id": "evt-2", "type": "order.updated"}).encode()
    wrong_types = event_bytes("evt-3", "7", occurred_at="yesterday")

    bad_json = deliver(not_json)
    incomplete = deliver(missing)
    mistyped = deliver(wrong_types)
    header_mismatch = deliver(event_bytes("evt-4", 2), HTTP_X_ORDERS_EVENT_ID="evt-other")

    assert bad_json.status_code == 400
    assert bad_json.json()["error"] == "invalid"
    assert incomplete.status_code == 400
    assert set(incomplete.json()["fields"]) == {"order_id", "order_version", "occurred_at"}
    assert set(mistyped.json()["fields"]) == {"order_version", "occurred_at"}
    assert set(header_mismatch.json()["fields"]) == {"event_id"}
    assert InboundEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_id", "evt-\u202e-1"),  # a bidirectional control
        ("event_id", "evt-\x00-1"),
        ("order_id", "ORD-\x07-1"),
        ("type", "order.\x1bupdated"),
    ],
)
def test_an_event_naming_itself_with_a_control_character_is_invalid_and_not_stored(
    deliver, field, value
):
    body = json.loads(event_bytes("evt-ok", 2))
    body[field] = value

    response = deliver(json.dumps(body).encode(), HTTP_X_ORDERS_EVENT_ID="")

    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert field in response.json()["fields"]
    assert "not allowed" in response.json()["fields"][field][0]
    assert InboundEvent.objects.count() == 0


def test_a_nul_anywhere_in_the_event_is_refused_before_the_database_sees_it(deliver):
    """PostgreSQL's jsonb takes no U+0000: a signed event carrying one deep inside was a 500."""
    nested = event_bytes("evt-nul", 2, extra={"lines": [{"note": "a\x00b"}]})
    in_a_key = event_bytes("evt-nul-key", 2, extra={"k\x00": 1})

    answers = [deliver(nested), deliver(in_a_key)]

    assert [a.status_code for a in answers] == [400, 400]
    assert all(
        a.json()["fields"] == {"body": ["U+0000 NULL is not allowed anywhere in the event."]}
        for a in answers
    )
    assert InboundEvent.objects.count() == 0


def test_duplicate_delivery_is_stored_once_and_processed_once(deliver, make_case, enqueued):
    case = make_case()
    body = event_bytes("evt-1", 3)

    first = deliver(body)
    case_version = reload(case).version
    second = deliver(body)

    assert first.json()["status"] == "stored"
    assert second.status_code == 202
    assert second.json() == {
        "event_id": "evt-1",
        "status": "already_stored",
        "processing": "processed",
    }
    event = InboundEvent.objects.get()
    assert (event.deliveries, event.attempts, event.processing) == (2, 1, "processed")
    assert (event.account, event.account_team) == (case.account, case.team)
    assert enqueued == []  # a duplicate of a processed event queues nothing
    assert event_evidence(case).count() == 1
    assert reload(case).version == case_version
    # Running the processing again by hand changes nothing either.
    assert inbound.inbound_event_process(event_id="evt-1") == "processed"
    assert event_evidence(case).count() == 1
    event.refresh_from_db()
    assert event.attempts == 1


# --- processing -----------------------------------------------------------------------------


def test_older_version_arriving_after_a_newer_one_changes_nothing(deliver, make_case):
    case = make_case()

    deliver(event_bytes("evt-v5", 5))
    after_newer = reload(case)
    deliver(event_bytes("evt-v4", 4))

    older = InboundEvent.objects.get(event_id="evt-v4")
    assert older.processing == "processed"
    assert "stale" in older.outcome
    assert "version 4" in older.outcome
    assert list(event_evidence(case).values_list("order_version", flat=True)) == [5]
    case = reload(case)
    assert (case.version, case.status) == (after_newer.version, after_newer.status)


def test_newer_order_version_invalidates_open_proposal_and_approval(deliver, ready_case, enqueued):
    case, proposal, approval = ready_case()

    deliver(event_bytes("evt-1", 2))

    case = reload(case)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    assert case.status == Status.WAITING_SOURCE
    assert proposal.status == Proposal.Status.INVALIDATED
    assert "event evt-1" in proposal.status_reason
    assert approval.revoked_at is not None
    assert live_approval(case) is None
    evidence = event_evidence(case).get()
    assert (evidence.external_reference, evidence.order_version) == ("event:evt-1", 2)
    assert evidence.source_system == "order_system"
    assert evidence.permitted_basis == "contract"
    event = InboundEvent.objects.get()
    assert event.processing == "processed"
    assert "invalidated" in event.outcome
    assert enqueued == [("reconciliation.tasks.source_check", case.pk)]


def test_a_read_older_than_the_event_that_invalidated_the_proposal_is_a_failed_check(
    deliver, ready_case, enqueued
):
    """The event queues a source check, and a check already under way answers late with the
    version before it. Before, that read was recorded: a proposal on version 1 went to an
    approver, and the apply was refused as a version conflict after they approved it."""
    case, _, _ = ready_case()
    deliver(event_bytes("evt-1", 2))
    enqueued.clear()

    with mock_source(version=1) as client:
        late = source_check(case_id=case.pk, client=client)

    case = reload(case)
    assert late == "retry_scheduled"
    assert case.status == Status.WAITING_SOURCE
    assert case.last_checked_order_version == 1  # the check before the event's, not this one
    assert "older version of the order than the case already knows" in case.last_error
    assert "older_version: version 1, the case knows 2" in case.last_error
    assert case.events.order_by("-id").first().action == Action.SOURCE_CHECK_FAILED
    assert EvidenceReference.objects.filter(case=case, kind="order_read").count() == 1
    assert enqueued == []

    with mock_source(version=2) as client:
        assert source_check(case_id=case.pk, client=client) == "checked"
    case = reload(case)
    assert (case.status, case.last_checked_order_version) == (Status.PREPARING_PROPOSAL, 2)
    assert case.last_error == ""


@pytest.mark.order_system
def test_newer_order_version_invalidates_a_case_approved_against_the_live_source(
    deliver, approved_case
):
    case = approved_case()
    seen = case.last_checked_order_version
    proposal = Proposal.objects.get(case=case, status=Proposal.Status.APPROVED)

    deliver(event_bytes("evt-live-1", seen + 1))

    case = reload(case)
    proposal.refresh_from_db()
    assert case.status == Status.WAITING_SOURCE
    assert proposal.status == Proposal.Status.INVALIDATED
    assert not Approval.objects.filter(proposal=proposal, revoked_at__isnull=True).exists()
    assert event_evidence(case).get().order_version == seen + 1


def test_held_case_is_not_moved_but_the_event_is_recorded(deliver, ready_case):
    case, proposal, approval = ready_case()
    with transaction.atomic():
        apply_transition(lock_case(case.pk), "hold", actor=SYSTEM, reason="effect unknown")
    held_version = reload(case).version

    deliver(event_bytes("evt-1", 2))

    case = reload(case)
    proposal.refresh_from_db()
    approval.refresh_from_db()
    assert case.status == Status.HELD
    assert proposal.status == Proposal.Status.APPROVED
    assert approval.revoked_at is None
    assert event_evidence(case).get().order_version == 2
    recorded = CaseEvent.objects.filter(case=case).latest("id")
    assert recorded.action == "reconciliation.order_event.recorded"
    assert "reconciliation decides" in recorded.reason
    assert case.version == held_version + 1


def test_own_confirmed_change_coming_back_is_recorded_only(deliver, make_case):
    case = make_case()
    Operation.objects.create(
        case=case,
        key=f"DATE-{case.number}-1",
        sequence=1,
        order_id=ORDER,
        change=case.change,
        change_hash=kinds.change_hash(case.change),
        confirmed_at=timezone.now(),
        result_order_version=4,
    )
    version = reload(case).version

    deliver(event_bytes("evt-own", 4))

    event = InboundEvent.objects.get()
    assert event.processing == "processed"
    assert "own change" in event.outcome
    assert event_evidence(case).count() == 0
    assert reload(case).version == version


def test_event_for_an_order_without_open_cases_is_processed_with_nothing_to_do(deliver):
    deliver(event_bytes("evt-1", 2, order_id="ORD-NOBODY"))

    event = InboundEvent.objects.get()
    assert event.processing == "processed"
    assert "No open case" in event.outcome


# --- failures, resends and retries ----------------------------------------------------------


@pytest.fixture
def fail_once(monkeypatch):
    """Make recording the evidence fail the first time (fault injection)."""
    real = inbound.evidence_add
    calls = {"n": 0}

    def flaky(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database hiccup")
        return real(**kwargs)

    monkeypatch.setattr("reconciliation.inbound.evidence_add", flaky)
    return calls


def test_failed_processing_is_visible_and_a_resend_gets_it_processed(
    deliver, make_case, fail_once, run_queued
):
    case = make_case()
    version = reload(case).version
    body = event_bytes("evt-1", 3)

    deliver(body)

    event = InboundEvent.objects.get()
    assert (event.processing, event.attempts) == ("failed", 1)
    assert event.last_error == "Unexpected error: RuntimeError: database hiccup"
    assert event.next_attempt_at is not None
    assert event.processed_at is None
    assert event_evidence(case).count() == 0
    assert reload(case).version == version

    resend = deliver(body, run=False)

    assert resend.status_code == 202
    assert resend.json() == {
        "event_id": "evt-1",
        "status": "already_stored",
        "processing": "pending",
    }
    assert run_queued() == ["processed"]
    event.refresh_from_db()
    assert (event.processing, event.attempts, event.deliveries) == ("processed", 2, 2)
    assert event.last_error == ""
    assert event.processed_at is not None
    assert event_evidence(case).count() == 1


@pytest.mark.order_system  # the real client, not the autouse mock, talks to nothing here
def test_an_order_system_that_does_not_answer_is_named_in_words_on_the_event(
    deliver, make_case, settings
):
    """The account of the event's order could not be read: the event's last error says so in
    words, with the client's code after them, not "Transient: connect_failed: …"."""
    make_case()
    settings.ORDER_SYSTEM_URL = "http://127.0.0.1:9"  # nothing listens there

    deliver(event_bytes("evt-down", 3))

    event = InboundEvent.objects.get()
    assert (event.processing, event.attempts) == ("failed", 1)
    assert event.last_error.startswith("The order system did not give the order's account: ")
    assert event.last_error.endswith(" (connect_failed).")
    assert "Transient" not in event.last_error
    assert event.outcome.startswith("Attempt 1 failed; nothing was changed. Next attempt ")


def test_retry_failed_events_retries_a_due_failed_event_only(deliver, make_case, fail_once):
    case = make_case()
    deliver(event_bytes("evt-1", 3))
    event = InboundEvent.objects.get()
    assert event.processing == "failed"

    assert retry_failed_events() == {}  # not due yet: the backoff is respected

    InboundEvent.objects.filter(pk=event.pk).update(
        next_attempt_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert retry_failed_events() == {"processed": 1}
    event.refresh_from_db()
    assert (event.processing, event.attempts) == ("processed", 2)
    assert event_evidence(case).count() == 1


def test_processing_gives_up_after_the_attempt_limit_and_stays_failed(
    deliver, make_case, monkeypatch
):
    make_case()

    def broken(**kwargs):
        raise RuntimeError("still broken")

    monkeypatch.setattr("reconciliation.inbound.evidence_add", broken)
    deliver(event_bytes("evt-1", 3))
    InboundEvent.objects.update(attempts=inbound.MAX_ATTEMPTS - 1, next_attempt_at=timezone.now())

    assert retry_failed_events() == {"failed": 1}

    event = InboundEvent.objects.get()
    assert (event.processing, event.attempts) == ("failed", inbound.MAX_ATTEMPTS)
    assert event.next_attempt_at is None
    assert "Gave up" in event.outcome
    assert retry_failed_events() == {}


def test_processing_gives_up_at_the_inbound_policy_bound(deliver, make_case, monkeypatch, settings):
    """The bound is the ``inbound`` retry policy's (a setting), not a constant of its own."""
    settings.INBOUND_ATTEMPT_LIMIT = 2
    make_case()

    def broken(**kwargs):
        raise RuntimeError("still broken")

    monkeypatch.setattr("reconciliation.inbound.evidence_add", broken)
    deliver(event_bytes("evt-1", 3))
    InboundEvent.objects.update(next_attempt_at=timezone.now())

    assert retry_failed_events() == {"failed": 1}

    event = InboundEvent.objects.get()
    assert (event.processing, event.attempts) == ("failed", 2)
    assert event.next_attempt_at is None
    assert "Gave up after 2 attempts" in event.outcome
    assert retry_failed_events() == {}


def test_pending_event_whose_task_was_lost_is_swept_up(deliver, make_case, enqueued):
    case = make_case()
    deliver(event_bytes("evt-1", 3), run=False)
    enqueued.clear()  # the queued task is lost
    assert retry_failed_events() == {}  # within the grace period it is left to its task

    InboundEvent.objects.update(next_attempt_at=timezone.now() - dt.timedelta(minutes=5))
    assert retry_failed_events() == {"processed": 1}
    assert event_evidence(case).count() == 1


# --- admin ----------------------------------------------------------------------------------


def test_lead_processes_a_failed_event_again_from_the_admin_and_an_agent_sees_none(
    deliver, make_case, fail_once, lead, agent
):
    case = make_case()
    deliver(event_bytes("evt-1", 3))
    event = InboundEvent.objects.get()
    assert event.processing == "failed"
    changelist = "/admin/reconciliation/inboundevent/"

    browser = Client()
    browser.force_login(agent)
    assert browser.get(changelist).status_code == 403

    browser.force_login(lead)
    page = browser.get(changelist)
    assert page.status_code == 200
    assert b"evt-1" in page.content
    browser.post(changelist, {"action": "process_again", "_selected_action": [event.pk]})

    event.refresh_from_db()
    assert event.processing == "processed"
    assert event_evidence(case).count() == 1


# --- end to end: the reference order system delivering to a live Holdfast -------------------


@pytest.mark.order_system
@pytest.mark.django_db(transaction=True)
def test_real_order_system_delivers_a_signed_event_that_is_stored_and_processed(
    make_case, settings
):
    from approvals.grants import grant_issue
    from tests.support.holdfast_server import serve_holdfast
    from tests.support.order_system import OrderSystemProcess

    new_date = timezone.localdate() + dt.timedelta(days=10)
    with (
        serve_holdfast() as holdfast_url,
        OrderSystemProcess(
            webhook_url=f"{holdfast_url}{URL}", extra_env={"ORDERS_DELIVERY_POLL_SECONDS": "0.1"}
        ) as orders,
    ):
        settings.ORDER_SYSTEM_URL = orders.base_url  # processing reads the order's account
        orders.seed(
            accounts=[{"account_id": "ACC-100", "name": "Northwind", "access_active": True}],
            orders=[
                {
                    "order_id": ORDER,
                    "account_id": "ACC-100",
                    "delivery_date": str(timezone.localdate() + dt.timedelta(days=3)),
                }
            ],
            slots=[{"date": str(new_date), "capacity": 5}],
        )
        case = make_case()
        # Someone else changes the order at the order system.
        grant = grant_issue(
            operation_key="EXT-1",
            order_id=ORDER,
            change=date_change(new_date),
            approval_id="AP-elsewhere",
            expires_at=timezone.now() + dt.timedelta(hours=1),
        )
        with OrderSystemClient(orders.base_url, timeouts=TIMEOUTS) as client:
            result = client.apply_operation(
                ORDER,
                operation_key="EXT-1",
                change=date_change(new_date),
                expected_version=1,
                fencing_token=1,
                approval_grant=grant,
            )
        deadline = time.monotonic() + 15
        while not InboundEvent.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

        event = InboundEvent.objects.get()
        assert (event.order_id, event.order_version) == (ORDER, result.order_version)
        assert event.processing == "pending"
        # Processing reads the order's account from the order system, so it runs while it is up.
        assert process_event(event.pk) == "processed"
    stored = InboundEvent.objects.get()
    # The order's account as the order system gave it, ours, and its team (who may see it).
    assert (stored.account_reference, stored.account, stored.account_team) == (
        "ACC-100",
        case.account,
        case.team,
    )
    evidence = event_evidence(case).get()
    assert evidence.order_version == result.order_version
    assert evidence.external_reference == f"event:{event.event_id}"


@pytest.mark.order_system
@pytest.mark.django_db(transaction=True)
def test_a_replayed_delivery_is_refused_while_a_resend_by_hand_is_signed_anew_and_accepted(
    settings,
):
    """The reference order system delivers to a live Holdfast (accepted); once the window has
    passed, the same bytes with the signature of their time are refused, and a resend by hand
    of the same event -- same id, same body, signed when sent -- is accepted."""
    from tests.support.holdfast_server import serve_holdfast
    from tests.support.order_system import OrderSystemProcess

    settings.ORDER_WEBHOOK_TOLERANCE_SECONDS = 2
    with (
        serve_holdfast() as holdfast_url,
        OrderSystemProcess(
            webhook_url=f"{holdfast_url}{URL}", extra_env={"ORDERS_DELIVERY_POLL_SECONDS": "0.1"}
        ) as orders,
    ):
        orders.seed(
            accounts=[{"account_id": "ACC-100", "name": "Northwind", "access_active": True}],
            orders=[{"order_id": ORDER, "account_id": "ACC-100", "delivery_date": "2031-03-06"}],
        )
        signed_then = int(time.time())
        orders.set_order(ORDER, status="shipped")  # a change at the source: one event
        deadline = time.monotonic() + 15
        while not InboundEvent.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (sent,) = orders.outbox()
        raw = json.dumps(
            {key: sent[key] for key in ("event_id", "type", "order_id", "order_version")}
            | {"occurred_at": sent["occurred_at"]},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        time.sleep(3.1)  # the first delivery's timestamp is now outside the window

        replayed = httpx.post(
            f"{holdfast_url}{URL}",
            content=raw,
            headers={
                "Content-Type": "application/json",
                "X-Orders-Event-Id": sent["event_id"],
                **webhook_headers(raw, at=signed_then),
            },
        )
        resent = orders.resend_event(sent["event_id"])

    assert InboundEvent.objects.get().event_id == sent["event_id"]
    assert replayed.status_code == 401
    assert replayed.json()["reason"] == "timestamp"
    assert resent == {"event_id": sent["event_id"], "accepted": True, "error": None}
    assert InboundEvent.objects.get().deliveries == 2
