"""An inbound event says whether a case of its account is on its order (``on_case``): who may
see it reads that in the page's index, with no look for a case. Whichever of a case's opening
and an event's processing commits last marks the event, in every interleaving.

Processing reads the order's account only when some case is open on the order: here another
account's case (another team's), so that the event's account is known (ACC-100's, as the order
system says) while no case of that account is on the order yet."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from cases import services as case_services
from cases.codes import Action
from cases.kernel import SYSTEM
from cases.models import CustomerAccount
from cases.services import case_open
from reconciliation import inbound
from reconciliation.models import InboundEvent
from reconciliation.selectors import inbound_events_for
from tests.reconciliation.test_inbound import mock_source
from tests.support.fixtures import date_change, days_ahead

ORDER = "ORD-5150"


def _stored(event_id: str = "evt-on-case-1", order_id: str = ORDER) -> InboundEvent:
    """An order.updated event as receipt stores it: pending, its account not read yet."""
    return InboundEvent.objects.create(
        event_id=event_id,
        type="order.updated",
        order_id=order_id,
        order_version=2,
        occurred_at=timezone.now(),
        body={"event_id": event_id, "order_id": order_id},
    )


def _process(event: InboundEvent) -> str:
    with mock_source(version=1) as client:  # the order system says ACC-100 owns the order
        return inbound.inbound_event_process(event_id=event.event_id, client=client)


def _open(account, order_id: str = ORDER, key: str = "mail-5150"):
    case, created = case_open(
        actor=SYSTEM,
        account=account,
        request_key=key,
        order_id=order_id,
        kind="delivery_date",
        change=date_change(days_ahead(9)),
    )
    assert created
    return case


@pytest.fixture
def elsewhere_case(other_team, outsider):
    """Another team's account's case, open on the order (anyone may open a case on any order
    id): the event's processing then reads the order's account."""
    stranger = CustomerAccount.objects.create(
        reference="ACC-200", name="Southwind Mill", team=other_team, verified=True
    )
    return _open(stranger, key="mail-stranger")


def _seen_by(user) -> set[str]:
    return set(inbound_events_for(user).values_list("event_id", flat=True))


def test_an_event_processed_before_its_case_opened_is_the_teams_once_the_case_opens(
    account, lead, elsewhere_case, django_capture_on_commit_callbacks
):
    event = _stored()
    with django_capture_on_commit_callbacks(execute=True):
        assert _process(event) == "processed"
    event.refresh_from_db()
    assert (event.account_id, event.on_case) == (account.pk, False)
    assert event.event_id not in _seen_by(lead)  # no case of the team on the order yet

    with django_capture_on_commit_callbacks(execute=True):
        _open(account)

    event.refresh_from_db()
    assert event.on_case is True
    assert event.event_id in _seen_by(lead)


def test_an_event_processed_after_its_case_opened_is_the_teams_at_once(
    account, lead, outsider, django_capture_on_commit_callbacks
):
    _open(account)
    event = _stored()
    with django_capture_on_commit_callbacks(execute=True):
        assert _process(event) == "processed"

    event.refresh_from_db()
    assert event.on_case is True  # found in its own transaction
    assert event.event_id in _seen_by(lead)
    assert event.event_id not in _seen_by(outsider)


def test_a_marking_that_fails_leaves_the_case_opened_and_says_so(
    account, monkeypatch, django_capture_on_commit_callbacks, caplog
):
    """The marking runs after the case's opening commits: an error in it does not turn the
    opened case into an error for whoever opened it (a retried intake would only find it)."""

    def broken(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(inbound, "inbound_events_on_case", broken)
    with django_capture_on_commit_callbacks(execute=True):
        case = _open(account)

    assert case.pk is not None
    assert "database went away" in caplog.text


def test_a_case_of_another_account_or_on_another_order_marks_nothing(
    account, elsewhere_case, django_capture_on_commit_callbacks
):
    """ACC-200's case is on the order, but the order system says ACC-100 owns it."""
    event = _stored()
    with django_capture_on_commit_callbacks(execute=True):
        _process(event)
        _open(account, order_id="ORD-5151", key="mail-5151")

    event.refresh_from_db()
    assert (event.account_id, event.on_case) == (account.pk, False)


def test_an_event_without_the_answer_is_no_teams_until_a_case_opens_on_its_order(
    account, lead, case, django_capture_on_commit_callbacks
):
    """``on_case`` empty (processed by a worker of the release before reconciliation 0018,
    which the upgrade stops first): no team's to see, as an event without a team, until a case
    of its account opens on its order."""
    old = _stored("evt-old-1", order_id="ORD-5199")
    InboundEvent.objects.filter(pk=old.pk).update(
        account=account, account_team=account.team, account_reference=account.reference
    )
    assert "evt-old-1" not in _seen_by(lead)

    with django_capture_on_commit_callbacks(execute=True):
        _open(account, order_id="ORD-5199", key="mail-5199")

    assert "evt-old-1" in _seen_by(lead)


# --- the two interleavings, with real threads on PostgreSQL ----------------------------------


def _marks(monkeypatch) -> list[int]:
    """What each :func:`inbound.inbound_events_on_case` after a commit marked."""
    marked: list[int] = []
    real = inbound.inbound_events_on_case

    def recording(**kwargs) -> int:
        count = real(**kwargs)
        marked.append(count)
        return count

    monkeypatch.setattr(inbound, "inbound_events_on_case", recording)
    return marked


def _in_thread(target) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run():
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def _let_go(go_on: threading.Event, thread: threading.Thread, errors: list) -> None:
    go_on.set()
    thread.join(timeout=60)
    assert not errors, errors


def _marked_by_the_last_commit(event: InboundEvent, lead, marked: list[int]) -> None:
    """The first marking found nothing to mark; the one after the last commit marked it."""
    assert marked == [0, 1]
    event.refresh_from_db()
    assert event.on_case is True
    assert event.event_id in _seen_by(lead)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_case_opening_while_the_event_is_processed_marks_it_after_the_event_commits(
    account, lead, elsewhere_case, monkeypatch
):
    """The event's processing reads no case and waits before its commit; the case opens and
    commits meanwhile, and its marking finds the event without its account (not committed):
    it marks nothing. The event, once committed, asks again and is marked."""
    marked = _marks(monkeypatch)
    event = _stored()
    looked, go_on = threading.Event(), threading.Event()
    real_set_account = inbound._set_account

    def set_account_then_wait(event, reference):
        real_set_account(event, reference)
        looked.set()
        assert go_on.wait(timeout=30)

    monkeypatch.setattr(inbound, "_set_account", set_account_then_wait)
    thread, errors = _in_thread(lambda: _process(event))
    assert looked.wait(timeout=30)

    _open(account)  # committed, and marked after its commit, while the event's is open
    assert marked == [0]

    _let_go(go_on, thread, errors)
    _marked_by_the_last_commit(event, lead, marked)
    assert event.processing == "processed"


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_an_event_processed_while_the_case_opens_is_marked_after_the_case_commits(
    account, lead, elsewhere_case, monkeypatch
):
    """The case's opening waits before its commit, its case inserted; the event is processed
    and committed meanwhile, and neither its look nor its marking sees the case (not
    committed). The case, once committed, marks it."""
    marked = _marks(monkeypatch)
    event = _stored()
    inserted, go_on = threading.Event(), threading.Event()
    real_record_event = case_services.record_event

    def record_event_then_wait(**kwargs):
        recorded = real_record_event(**kwargs)
        if kwargs["action"] == Action.CASE_CREATED:
            inserted.set()
            assert go_on.wait(timeout=30)
        return recorded

    monkeypatch.setattr(case_services, "record_event", record_event_then_wait)
    thread, errors = _in_thread(lambda: _open(account))
    assert inserted.wait(timeout=30)

    assert _process(event) == "processed"
    event.refresh_from_db()
    assert event.on_case is False
    assert marked == [0]

    _let_go(go_on, thread, errors)
    _marked_by_the_last_commit(event, lead, marked)


def _plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


@pytest.mark.postgres_only
def test_counting_a_leads_events_looks_for_no_case_when_the_event_says(account, lead, case):
    """The failed events a lead may see were counted with a look for a case per event (1,042
    at 1M cases): now the events that say a case is on their order are counted with none."""
    for n in range(30):
        _stored(f"evt-failed-{n}", order_id=case.order_id)
    InboundEvent.objects.update(
        processing="failed",
        account=account,
        account_team=account.team,
        account_reference=account.reference,
        on_case=True,
    )
    shown = inbound_events_for(lead).filter(processing="failed")
    sql, params = shown.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM ({sql}) t", params)
        plan = cursor.fetchone()[0][0]["Plan"]

    looks = [
        node.get("Actual Loops", 0)
        for node in _plan_nodes(plan)
        if node.get("Relation Name") == "cases_case"
        or node.get("Index Name", "").startswith("case")
    ]
    assert shown.count() == 30
    assert sum(looks) == 0, plan


def test_the_migration_gives_the_events_stored_before_it_their_answer(account, lead, case):
    """reconciliation 0018: each event whose account is known is told whether a case of that
    account is on its order; one without an account is left alone. A lead then sees what the
    look for a case showed them before 0018."""
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps

    on_its_case = _stored("evt-old-case", order_id=case.order_id)
    no_case = _stored("evt-old-none", order_id="ORD-NONE")
    _stored("evt-old-pending", order_id=case.order_id)  # its account not read yet
    InboundEvent.objects.filter(pk__in=[on_its_case.pk, no_case.pk]).update(
        account=account, account_team=account.team, account_reference=account.reference
    )
    assert _seen_by(lead) == set()  # without the answer, no team's

    migration = import_module("reconciliation.migrations.0018_inboundevent_on_case")
    assert migration.set_on_case(apps, SimpleNamespace(connection=connection)) == 2

    answers = dict(InboundEvent.objects.values_list("event_id", "on_case"))
    assert answers == {"evt-old-case": True, "evt-old-none": False, "evt-old-pending": None}
    assert _seen_by(lead) == {"evt-old-case"}  # as the look for a case found before 0018
