"""Case references per team: each team its own prefix and counter, old references unchanged,
operation keys unique across teams, and two intakes on one team at once never share a number."""

from __future__ import annotations

import threading
import time
from importlib import import_module

import pytest
from django.apps import apps as django_apps
from django.db import connection, transaction
from rest_framework.test import APIClient

from cases.kernel import SYSTEM
from cases.models import Case, CounterRow, CustomerAccount, Team
from cases.references import (
    case_number_next,
    case_prefix_errors,
    counter_name,
    free_case_prefix,
    operation_key_part,
)
from cases.services import case_open
from reconciliation.restore_detection import operation_key_match
from tests.support.fixtures import date_change

THREADS = 8


@pytest.fixture
def other_account(other_team, outsider):
    return CustomerAccount.objects.create(
        reference="ACC-200", name="Contoso Returns", team=other_team, verified=True
    )


def _open(account, key, order="ORD-7731"):
    import datetime as dt

    from django.utils import timezone

    case, _ = case_open(
        actor=SYSTEM,
        account=account,
        request_key=key,
        order_id=order,
        kind="delivery_date",
        change=date_change(timezone.localdate() + dt.timedelta(days=7)),
    )
    return case


def test_each_team_counts_its_own_cases_under_its_own_prefix(account, other_account):
    first = _open(account, "a-1", "ORD-1")
    theirs = _open(other_account, "b-1", "ORD-2")
    second = _open(account, "a-2", "ORD-3")

    assert (account.team.case_prefix, other_account.team.case_prefix) == ("D", "R")
    assert [first.reference, theirs.reference, second.reference] == ["D-1", "R-1", "D-2"]


def test_operation_keys_stay_unique_across_teams_and_parse(account, other_account):
    mine, theirs = _open(account, "a-1", "ORD-1"), _open(other_account, "b-1", "ORD-2")

    assert (mine.number, theirs.number) == (1, 1)
    # The deployment's original prefix (D) keeps the keys it always had; others name theirs.
    assert operation_key_part(mine) == "1"
    assert operation_key_part(theirs) == "R1"
    for key, prefix, number in [("DATE-41-1", "", "41"), ("DATE-R1-2", "R", "1")]:
        match = operation_key_match(key)
        assert match is not None
        assert (match.group("prefix"), match.group("number")) == (prefix, number)


def test_the_migration_keeps_old_references_and_counts_past_them(
    account, other_account, lead, settings
):
    """Before: one sequence (D-41 Deliveries, D-42 Returns, D-43 Deliveries). After: D stays
    with Deliveries and counts on past every D- number; Returns gets R and its own counter."""
    migration = import_module("cases.migrations.0026_team_case_prefix")
    cases = [
        _open(account, "a-1", "ORD-1"),
        _open(other_account, "b-1", "ORD-2"),
        _open(account, "a-2", "ORD-3"),
    ]
    for case, number in zip(cases, (41, 42, 43), strict=True):
        Case.objects.filter(pk=case.pk).update(number=number, reference=f"D-{number}")
    Team.objects.filter(pk=account.team.pk).update(case_prefix="X")
    Team.objects.filter(pk=other_account.team.pk).update(case_prefix="Y")
    CounterRow.objects.all().delete()
    CounterRow.objects.create(name="case_number", value=43)

    migration.assign_prefixes(django_apps, None)

    account.team.refresh_from_db()
    other_account.team.refresh_from_db()
    assert (account.team.case_prefix, other_account.team.case_prefix) == ("D", "R")
    assert _open(account, "a-3", "ORD-4").reference == "D-44"
    assert _open(other_account, "b-2", "ORD-5").reference == "R-43"
    client = APIClient()
    client.force_authenticate(lead)
    for reference in ("D-41", "D-43", "D-44"):
        assert client.get(f"/api/cases/{reference}/").json()["reference"] == reference


def test_a_new_team_gets_a_free_prefix_and_a_lead_may_set_a_valid_unique_one(team, other_team):
    assert free_case_prefix("Dispatch", ["D", "R"]) == "DI"
    assert Team.objects.create(name="Dispatch").case_prefix == "DI"
    assert case_prefix_errors("D") == ["Another team uses the prefix D."]
    assert case_prefix_errors("D", team_id=team.pk) == []
    for bad in ["", "D1", "D-", "TOOLONGXX", "Ü"]:
        assert case_prefix_errors(bad), bad
    assert case_prefix_errors("NEW") == []


def test_a_team_with_cases_made_before_its_counter_counts_on_past_them(account):
    case = _open(account, "a-1", "ORD-1")
    Case.objects.filter(pk=case.pk).update(number=7, reference="D-7")
    CounterRow.objects.filter(name=counter_name(account.team.pk)).delete()

    assert case_number_next(account.team) == (8, "D-8")


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_two_intakes_on_one_team_at_once_get_distinct_numbers(account, other_account):
    """The second intake waits for the first one's counter row (measured), then takes the next
    number; an intake of another team does not wait. Then eight intakes at once: 8 numbers."""
    _open(account, "warm-1", "ORD-W1")  # the counter rows exist
    _open(other_account, "warm-2", "ORD-W2")
    holding = threading.Event()
    waited: dict[str, float] = {}

    def first():
        with transaction.atomic():
            case_number_next(account.team)
            holding.set()
            time.sleep(0.5)
        connection.close()

    def second(name, team):
        holding.wait(5)
        started = time.monotonic()
        with transaction.atomic():
            case_number_next(team)
        waited[name] = time.monotonic() - started
        connection.close()

    threads = [
        threading.Thread(target=first),
        threading.Thread(target=second, args=("same team", account.team)),
        threading.Thread(target=second, args=("other team", other_account.team)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert waited["same team"] >= 0.3, waited  # contention: it waited for the first's commit
    assert waited["other team"] < 0.3, waited

    barrier = threading.Barrier(THREADS)
    references: list[str] = []
    errors: list[BaseException] = []

    def intake(i: int):
        try:
            barrier.wait(10)
            references.append(_open(account, f"race-{i}", f"ORD-R{i}").reference)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    racers = [threading.Thread(target=intake, args=(i,)) for i in range(THREADS)]
    for thread in racers:
        thread.start()
    for thread in racers:
        thread.join(60)
    assert errors == []
    numbers = sorted(int(reference.split("-")[1]) for reference in references)
    # warm-1 was D-1 and the two measured calls took 2 and 3 (their cases were never made).
    assert numbers == list(range(4, 4 + THREADS))


def test_the_admin_sets_a_new_teams_prefix_validated_and_unique(team):
    from cases.admin.staff import TeamForm

    for prefix, ok in [("N", True), ("d", False), ("N1", False), ("", True)]:
        form = TeamForm(data={"name": f"New {prefix}", "case_prefix": prefix})
        assert form.is_valid() is ok, (prefix, form.errors)
    form = TeamForm(data={"name": "Northern", "case_prefix": "N"})
    assert form.is_valid(), form.errors
    assert form.save().case_prefix == "N"
