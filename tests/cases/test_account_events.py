"""Every write to a customer account is audited on the account's own trail.

Created, verified, its name or email changed, its access revoked: each service records an
account event in the same transaction (actor, code, reason, time), linked into the account's
hash chain; the account's admin page shows them; nothing rewrites them.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.urls import reverse

from cases.append_only import maintenance
from cases.audit import verify_account_chains
from cases.codes import AccountAction
from cases.exceptions import ActionNotPermitted, CaseError
from cases.kernel import Worker
from cases.models import AccountEvent, CustomerAccount
from cases.services import account_create, account_update, account_verify
from reconciliation.revocation import account_revoke_access


def _trail(account) -> list[tuple[str, str, str]]:
    return list(
        AccountEvent.objects.filter(account=account)
        .order_by("id")
        .values_list("action", "actor_label", "reason")
    )


@pytest.fixture
def unverified(team, lead, backup):
    return CustomerAccount.objects.create(
        reference="ACC-300", name="Eastwind Foods", team=team, email="a@eastwind.example"
    )


def test_creating_an_account_through_the_admin_records_who_created_it(client, team, db):
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(root)

    response = client.post(
        reverse("admin:cases_customeraccount_add"),
        {
            "reference": "ACC-400",
            "name": "Westwind Goods",
            "email": "",
            "team": team.pk,
            "change_reason": "Signed the contract today",
        },
    )

    assert response.status_code == 302, response.content[:2000]
    account = CustomerAccount.objects.get(reference="ACC-400")
    assert _trail(account) == [("cases.account.created", "root", "Signed the contract today")]
    event = AccountEvent.objects.get(account=account)
    assert event.actor == root
    assert event.detail["verified"] is False


def test_creating_an_account_needs_the_right_to_add_one(team, lead):
    account = CustomerAccount(reference="ACC-401", name="Nope", team=team)

    with pytest.raises(ActionNotPermitted):
        account_create(account=account, actor=lead)

    assert not CustomerAccount.objects.filter(reference="ACC-401").exists()
    assert not AccountEvent.objects.exists()


def test_verifying_an_account_is_recorded_once(unverified, lead):
    account_verify(account=unverified, actor=lead, reason="Passport seen")
    account_verify(account=unverified, actor=lead)  # already verified: nothing new

    assert _trail(unverified) == [("cases.account.verified", "lead", "Passport seen")]
    unverified.refresh_from_db()
    assert unverified.verified


def test_a_refused_verification_writes_nothing(unverified, agent):
    with pytest.raises(ActionNotPermitted):
        account_verify(account=unverified, actor=agent)

    assert _trail(unverified) == []


def test_changing_the_name_or_email_is_recorded_with_the_fields_not_the_values(account, lead):
    account_update(account=account, actor=lead, reason="Renamed", name="Northwind Bakers")
    account_update(account=account, actor=lead, reason="Same again", name="Northwind Bakers")

    assert _trail(account) == [("cases.account.updated", "lead", "Renamed")]
    event = AccountEvent.objects.get(account=account)
    assert event.detail == {"fields": ["name"]}
    assert "Northwind Bakers" not in str(event.detail)


def test_revoking_access_is_recorded_with_the_cases_it_stopped(account, case, lead):
    account_revoke_access(account=account, actor=lead, reason="Contract ended")

    assert _trail(account) == [("cases.account.access_revoked", "lead", "Contract ended")]
    event = AccountEvent.objects.get(account=account)
    assert event.detail == {"access_was_active": True, "cases": [case.reference]}


def test_a_worker_is_recorded_by_its_label(unverified):
    account_verify(account=unverified, actor=Worker("system:kyc"))

    event = AccountEvent.objects.get(account=unverified)
    assert (event.actor, event.actor_label) == (None, "system:kyc")


def test_a_failed_revocation_leaves_no_account_event(account, case, lead, monkeypatch):
    from reconciliation import revocation

    def crash(**kwargs):
        raise RuntimeError("worker crashed mid-revocation")

    monkeypatch.setattr(revocation, "case_revoke", crash)
    with pytest.raises(RuntimeError):
        account_revoke_access(account=account, actor=lead, reason="Contract ended")

    assert _trail(account) == []


def test_the_account_page_shows_its_history(client, account, lead, backup):
    account_update(account=account, actor=lead, reason="New mailbox", email="x@northwind.example")
    account_revoke_access(account=account, actor=backup, reason="Contract ended")
    client.force_login(lead)

    page = client.get(reverse("admin:cases_customeraccount_change", args=[account.pk])).text

    assert "Account history" in page
    for words in (AccountAction.UPDATED.words, AccountAction.ACCESS_REVOKED.words):
        assert words in page
    assert "New mailbox" in page
    assert "Contract ended" in page
    assert page.index("Contract ended") < page.index("New mailbox")  # newest first


def test_each_account_event_links_to_the_one_before(unverified, lead):
    account_verify(account=unverified, actor=lead)
    account_update(account=unverified, actor=lead, reason="r", name="Eastwind")
    account_revoke_access(account=unverified, actor=lead, reason="gone")

    first, second, third = AccountEvent.objects.filter(account=unverified).order_by("id")
    assert first.prev_hash == ""
    assert second.prev_hash == first.hash
    assert third.prev_hash == second.hash
    assert verify_account_chains().ok


def test_audit_verify_finds_a_rewritten_account_event(unverified, lead):
    account_verify(account=unverified, actor=lead, reason="Passport seen")
    account_update(account=unverified, actor=lead, reason="r", name="Eastwind")
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert "Account chains: 2 event(s) of 1 account(s) checked." in out.getvalue()

    with maintenance():
        AccountEvent.objects.filter(action=AccountAction.VERIFIED).update(reason="forged")

    out = StringIO()
    with pytest.raises(CommandError, match="broken in 1 account"):
        call_command("audit_verify", stdout=out)
    assert f"{unverified.reference}: broken link at event" in out.getvalue()


def test_account_events_are_never_rewritten_or_deleted_through_the_orm(unverified, lead):
    account_verify(account=unverified, actor=lead)
    event = AccountEvent.objects.get()

    with pytest.raises(PermissionError, match="append-only"):
        AccountEvent.objects.filter(pk=event.pk).update(reason="x")
    with pytest.raises(PermissionError, match="append-only"):
        unverified.events.all().delete()
    event.reason = "x"
    with pytest.raises(PermissionError, match="append-only"):
        event.save()
    with pytest.raises(PermissionError, match="append-only"):
        event.delete()


def test_an_unregistered_account_action_is_refused(unverified, lead):
    from cases.account_events import account_event_record, account_lock

    with pytest.raises(ValueError, match="cases.account.frobbed"), transaction.atomic():
        account_event_record(
            account=account_lock(unverified), action="cases.account.frobbed", actor=lead
        )


@pytest.mark.postgres_only
def test_the_database_refuses_rewriting_an_account_event(unverified, lead):
    account_verify(account=unverified, actor=lead)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL holdfast.maintenance = 'off'")
    for statement in (
        "UPDATE cases_accountevent SET reason = 'forged'",
        "DELETE FROM cases_accountevent",
    ):
        with (
            pytest.raises(ProgrammingError, match="cases_accountevent is append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)


def test_a_service_error_is_a_case_error(unverified, agent):
    """The admin turns these into messages: a refusal is a ``CaseError``."""
    with pytest.raises(CaseError):
        account_update(account=unverified, actor=agent, reason="r", name="x")
