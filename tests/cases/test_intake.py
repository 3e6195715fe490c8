"""Intake: one customer request opens exactly one case, however often or concurrently it arrives."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from cases.audit import stored_hash
from cases.exceptions import ActionNotPermitted, InvalidCaseInput, OpenCaseExists
from cases.kernel import SYSTEM
from cases.models import Case, CaseEvent, CustomerAccount, Status, WaitingOn
from cases.services import case_open
from tests.support.fixtures import address_change, cancellation_change, date_change

FRIDAY = dt.date(2030, 1, 4)


def _intake(account, actor=SYSTEM, key="email-1", change=None, **extra):
    change = change or date_change(FRIDAY)
    fields = {"order_id": "ORD-7731", "kind": change["kind"], "change": change, **extra}
    return case_open(actor=actor, account=account, request_key=key, **fields)


def test_same_request_key_twice_opens_one_case(account, writes):
    first, created_first = _intake(account)
    after_first = writes()
    second, created_second = _intake(account, order_id="ORD-OTHER")

    assert (created_first, created_second) == (True, False)
    assert second.pk == first.pk
    assert second.reference == first.reference
    assert second.order_id == "ORD-7731"  # the repeat changes nothing
    assert writes() == after_first == (1, 2)


def test_same_request_key_on_another_account_opens_another_case(account, team):
    other = CustomerAccount.objects.create(
        reference="ACC-101", name="Eastwind", team=team, verified=True
    )
    first, _ = _intake(account)
    second, created = _intake(other)

    assert created is True
    assert second.pk != first.pk


def test_case_references_are_sequential(account):
    first, _ = _intake(account, key="a")
    second, _ = _intake(account, key="b", order_id="ORD-7732")

    assert second.number == first.number + 1
    assert first.reference == f"D-{first.number}"
    assert second.reference == f"D-{second.number}"


def test_intake_for_verified_account_writes_created_and_source_check_events(account, lead, backup):
    case, _ = _intake(account)

    events = list(CaseEvent.objects.filter(case=case).order_by("id"))
    assert [(e.action, e.from_status, e.to_status, e.version) for e in events] == [
        ("cases.case.created", "", Status.NEW, 1),
        ("cases.case.transitioned", Status.NEW, Status.WAITING_SOURCE, 2),
    ]
    assert {e.actor_label for e in events} == {"system"}
    assert all(e.actor is None for e in events)
    assert events[0].detail == {
        "request_key": "email-1",
        "order_id": "ORD-7731",
        "change": date_change(FRIDAY),
    }
    assert events[1].detail["transition"] == "request_source_check"
    case.refresh_from_db()
    assert case.version == events[-1].version == 2
    assert case.status == Status.WAITING_SOURCE
    assert case.waiting_on == WaitingOn.ORDER_SYSTEM
    assert case.next_check_at is not None
    assert (case.owner, case.backup) == (lead, backup)


def test_intake_chains_its_events_without_reading_the_chain_back(account):
    """A case inserted by this intake has no events but the ones it writes, in order: its
    created event starts the chain and the next links to it, with no read of the chain's head."""
    with CaptureQueriesContext(connection) as queries:
        case, _ = _intake(account)

    heads = [
        q["sql"] for q in queries.captured_queries if '"hash" FROM "cases_caseevent"' in q["sql"]
    ]
    assert heads == []
    created, moved = CaseEvent.objects.filter(case=case).order_by("id")
    assert (created.prev_hash, moved.prev_hash) == ("", created.hash)
    assert (created.hash, moved.hash) == (stored_hash(created), stored_hash(moved))


def test_intake_for_unverified_account_stays_new_with_one_event(account):
    CustomerAccount.objects.filter(pk=account.pk).update(verified=False)
    account.refresh_from_db()

    case, _ = _intake(account)

    events = list(CaseEvent.objects.filter(case=case))
    assert [(e.action, e.version) for e in events] == [("cases.case.created", 1)]
    case.refresh_from_db()
    assert (case.status, case.version, case.waiting_on) == (Status.NEW, 1, WaitingOn.OWNER)


def test_intake_by_a_person_records_them_as_the_actor(account, agent):
    case, created = _intake(account, actor=agent)

    assert created is True
    assert set(CaseEvent.objects.filter(case=case).values_list("actor", "actor_label")) == {
        (agent.pk, "agent")
    }


def test_auditor_cannot_open_a_case(account, auditor, writes):
    with pytest.raises(ActionNotPermitted):
        _intake(account, actor=auditor)

    assert writes() == (0, 0)


def test_member_of_another_team_cannot_open_a_case_for_this_team(account, outsider, writes):
    with pytest.raises(ActionNotPermitted):
        _intake(account, actor=outsider)

    assert writes() == (0, 0)


def test_intake_for_team_without_owner_is_refused(other_team, writes):
    orphan = CustomerAccount.objects.create(
        reference="ACC-300", name="Orphan", team=other_team, verified=True
    )

    with pytest.raises(InvalidCaseInput) as refused:
        _intake(orphan)

    assert "account" in refused.value.fields
    assert writes() == (0, 0)


def test_a_team_whose_default_backup_is_its_owner_opens_cases_without_a_backup(account, lead):
    # Saved outside the team form, which refuses it: an intake opened a 500 (the database's
    # case_backup_is_not_owner) and lost the customer's request.
    account.team.default_owner, account.team.default_backup = lead, lead
    account.team.save()

    case, created = _intake(account)

    assert created is True
    assert (case.owner, case.backup) == (lead, None)


def test_the_team_form_refuses_a_default_backup_who_is_the_default_owner(team, lead, backup):
    from cases.admin.staff import TeamForm

    def form(owner, backup_):
        return TeamForm(
            data={"name": team.name, "default_owner": owner.pk, "default_backup": backup_.pk},
            instance=team,
        )

    same = form(lead, lead)
    assert not same.is_valid()
    assert "choose someone other than the default owner" in same.errors["default_backup"][0]
    assert form(lead, backup).is_valid()


def test_the_team_form_offers_no_auditor_or_approver_only_as_default_owner(
    team, lead, backup, auditor, approver
):
    from cases.admin.staff import TeamForm

    offered = TeamForm(instance=team).fields["default_owner"].queryset  # type: ignore[attr-defined]

    assert set(offered) == {lead, backup}
    refused = TeamForm(data={"name": team.name, "default_owner": auditor.pk}, instance=team)
    assert "default_owner" in refused.errors


# --- one open case per order and kind ----------------------------------------------------------


def test_a_second_request_for_an_order_with_an_open_case_of_its_kind_is_refused(account, writes):
    first, _ = _intake(account, key="email-1")
    before = writes()

    with pytest.raises(OpenCaseExists) as refused:
        _intake(account, key="phone-2", change=date_change(FRIDAY + dt.timedelta(days=1)))

    assert refused.value.reference == first.reference
    assert refused.value.code == "open_case_exists"
    assert refused.value.http_status == 409
    assert first.reference in refused.value.detail
    assert writes() == before


def test_different_kinds_of_change_on_one_order_may_be_open_together(account):
    date, _ = _intake(account, key="k-date")
    address, created_address = _intake(account, key="k-addr", change=address_change())
    cancel, created_cancel = _intake(account, key="k-cancel", change=cancellation_change())

    assert created_address
    assert created_cancel
    assert [c.kind for c in (date, address, cancel)] == [
        "delivery_date",
        "shipping_address",
        "order_cancellation",
    ]
    assert {c.order_id for c in (date, address, cancel)} == {"ORD-7731"}


def test_once_the_open_case_is_closed_the_order_takes_a_new_case_of_its_kind(account, agent):
    from cases.services import case_cancel_request

    first, _ = _intake(account, key="email-1")
    case_cancel_request(case=first, actor=agent, reason="Customer withdrew", via="admin")

    second, created = _intake(account, key="email-2")

    assert created
    assert second.pk != first.pk


def test_the_re_sent_request_finds_its_case_before_the_open_case_rule(account):
    first, _ = _intake(account, key="email-1")

    again, created = _intake(account, key="email-1", change=date_change(FRIDAY))

    assert (again.pk, created) == (first.pk, False)


def test_the_change_is_validated_by_its_kind_and_stored_canonical(account, writes):
    with pytest.raises(InvalidCaseInput) as refused:
        _intake(account, change=address_change(country="G1", surprise="x"))
    assert set(refused.value.fields) == {"change.address.country", "change.address.surprise"}
    assert writes() == (0, 0)

    case, _ = _intake(account, change=address_change(name="  Dana  ", country="gb", line2=""))

    assert case.change == {
        "kind": "shipping_address",
        "address": {
            "name": "Dana",
            "line1": "4 Quay Road",
            "city": "Bristol",
            "postal_code": "BS1 5TX",
            "country": "GB",
        },
    }


@pytest.mark.parametrize("code", ["ZZ", "XX", "qq"])
def test_a_country_code_no_country_has_is_refused(account, writes, code):
    """ZZ and XX are two letters but no country: they were accepted (201) and went to an
    approver whose proposal the order system then refused."""
    with pytest.raises(InvalidCaseInput) as refused:
        _intake(account, change=address_change(country=code))

    assert refused.value.fields == {
        "change.address.country": [
            f"{code.upper()} is no country: an ISO 3166-1 alpha-2 code, e.g. GB."
        ]
    }
    assert writes() == (0, 0)


def test_a_kind_this_desk_does_not_offer_is_refused(account, writes):
    with pytest.raises(InvalidCaseInput) as refused:
        case_open(
            actor=SYSTEM,
            account=account,
            request_key="k",
            order_id="ORD-1",
            kind="gift_wrap",
            change={"kind": "gift_wrap"},
        )
    assert set(refused.value.fields) == {"kind"}
    assert writes() == (0, 0)


def test_the_database_refuses_a_second_open_case_of_an_order_and_kind(account, make_case):
    """The partial unique constraint stands behind the service's check."""
    case = make_case()

    with pytest.raises(IntegrityError), transaction.atomic():
        Case.objects.create(
            reference="D-999",
            number=999,
            account=account,
            request_key="raw",
            order_id=case.order_id,
            kind=case.kind,
            change=case.change,
            team=case.team,
            owner=case.owner,
        )


# --- the race --------------------------------------------------------------------------------

THREADS = 8
ROUNDS = 5


class _CaseInsertObserver:
    """Notes whether this connection tried to insert a case and whether the insert lost.

    A thread that sends ``INSERT INTO cases_case`` has got past the "is there a case for this
    key already?" check; one whose insert then fails with IntegrityError lost the race to the
    unique constraint.
    """

    def __init__(self):
        self.inserted = False
        self.lost_to_constraint = False

    def __call__(self, execute, sql, params, many, context):
        is_case_insert = sql.startswith('INSERT INTO "cases_case" ')
        self.inserted = self.inserted or is_case_insert
        try:
            return execute(sql, params, many, context)
        except IntegrityError:
            if is_case_insert:
                self.lost_to_constraint = True
            raise


def _race(account, key: str) -> list[dict]:
    barrier = threading.Barrier(THREADS)
    results: list[dict] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run():
        observer = _CaseInsertObserver()
        try:
            connection.ensure_connection()  # connect before the barrier, not after it
            barrier.wait(timeout=30)
            with connection.execute_wrapper(observer):
                case, created = case_open(
                    actor=SYSTEM,
                    account=account,
                    request_key=key,
                    order_id=f"ORD-{key}",
                    kind="delivery_date",
                    change=date_change(FRIDAY),
                )
            with lock:
                results.append(
                    {
                        "pk": case.pk,
                        "created": created,
                        "inserted": observer.inserted,
                        "lost": observer.lost_to_constraint,
                    }
                )
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(results) == THREADS
    return results


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_intake_of_one_request_key_opens_one_case(account):
    """Eight threads submit the same request at once: one case, one creator, and the losers
    return the winner's case after losing to the unique constraint."""
    contended_rounds = 0
    for round_no in range(ROUNDS):
        key = f"race-{round_no}"
        results = _race(account, key)

        assert Case.objects.filter(account=account, request_key=key).count() == 1
        case = Case.objects.get(account=account, request_key=key)
        assert {r["pk"] for r in results} == {case.pk}
        assert sum(r["created"] for r in results) == 1
        assert CaseEvent.objects.filter(case=case, action="cases.case.created").count() == 1
        assert CaseEvent.objects.filter(case=case).count() == 2
        # Every thread that reached the insert but did not create the case lost to the
        # constraint (and returned the winner's case), and no thread lost twice.
        inserted = [r for r in results if r["inserted"]]
        assert [r for r in inserted if not r["created"]] == [r for r in results if r["lost"]]
        if len(inserted) > 1:
            contended_rounds += 1

    # Proof that the race was real: in at least one round more than one thread got past the
    # "existing?" check and reached the INSERT at the same time.
    assert contended_rounds >= 1
    assert Case.objects.count() == ROUNDS


def _race_for_the_order(account, round_no: int) -> list[dict]:
    """THREADS intakes of one kind to one order, each with its own request key, at once."""
    barrier = threading.Barrier(THREADS)
    results: list[dict] = []
    lock = threading.Lock()

    def run(i: int):
        observer = _CaseInsertObserver()
        outcome: dict = {}
        try:
            connection.ensure_connection()
            barrier.wait(timeout=30)
            with connection.execute_wrapper(observer):
                case, created = case_open(
                    actor=SYSTEM,
                    account=account,
                    request_key=f"round-{round_no}-{i}",
                    order_id=f"ORD-R{round_no}",
                    kind="delivery_date",
                    change=date_change(FRIDAY),
                )
            outcome = {"pk": case.pk, "created": created}
        except OpenCaseExists as exc:
            outcome = {"refused": exc.reference}
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome = {"error": exc}
        finally:
            outcome["lost"] = observer.lost_to_constraint
            with lock:
                results.append(outcome)
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [r for r in results if "error" in r] == []
    return results


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_intakes_for_one_order_and_kind_open_one_case(account):
    """Eight requests for the same kind of change to one order, each its own request key, at
    once: one case; every other one is refused naming it, some after losing to the partial
    unique constraint (proof the race reached the database)."""
    lost = 0
    for round_no in range(ROUNDS):
        results = _race_for_the_order(account, round_no)
        cases = Case.objects.filter(order_id=f"ORD-R{round_no}")

        assert cases.count() == 1
        case = cases.get()
        assert [r["pk"] for r in results if "pk" in r] == [case.pk]
        assert {r["refused"] for r in results if "refused" in r} == {case.reference}
        lost += sum(r["lost"] for r in results)
    assert lost >= 1
