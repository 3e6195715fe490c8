"""Review: the inbound events admin shows every team's order receipts to any team's lead.

Receipts carry order ids, versions and the full event body. A lead of another team sees (and
can "process again") the events of this team's orders.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from reconciliation.models import InboundEvent

CHANGELIST = "admin:reconciliation_inboundevent_changelist"


@pytest.fixture
def team_event(case):
    """An order event for the order of ``case`` (team Deliveries)."""
    return InboundEvent.objects.create(
        event_id="evt-review-1",
        type="order.updated",
        order_id=case.order_id,
        order_version=3,
        occurred_at=timezone.now(),
        # as processing read it from the order system, and our account of it with its team
        account_reference=case.account.reference,
        account=case.account,
        account_team=case.account.team,
        on_case=True,  # the case is on the order
        body={"event_id": "evt-review-1", "order_id": case.order_id, "delivery_date": "2030-01-02"},
    )


def test_lead_of_another_team_does_not_see_this_teams_order_events(client, outsider, team_event):
    client.force_login(outsider)

    response = client.get(reverse(CHANGELIST))

    listed = {event.event_id for event in response.context["cl"].result_list}
    assert team_event.event_id not in listed


def test_lead_of_another_team_cannot_open_this_teams_order_event(client, outsider, team_event):
    client.force_login(outsider)

    response = client.get(reverse("admin:reconciliation_inboundevent_change", args=[team_event.pk]))

    assert response.status_code in {302, 404}
    assert team_event.order_id not in response.content.decode()


def test_lead_of_the_team_still_sees_its_order_events(client, lead, team_event):
    client.force_login(lead)

    response = client.get(reverse(CHANGELIST))

    listed = {event.event_id for event in response.context["cl"].result_list}
    assert team_event.event_id in listed


def test_an_event_of_another_account_on_this_teams_order_is_not_this_teams(
    client, lead, case, other_team
):
    """The order system reported another account for the order (anyone may open a case on
    any order id): the team's case on that order does not make the event the team's."""
    from cases.models import CustomerAccount

    stranger = CustomerAccount.objects.create(reference="ACC-900", name="Other", team=other_team)
    InboundEvent.objects.create(
        event_id="evt-stranger",
        type="order.updated",
        order_id=case.order_id,
        order_version=3,
        occurred_at=timezone.now(),
        account_reference=stranger.reference,
        account=stranger,
        account_team=other_team,
        body={"event_id": "evt-stranger", "order_id": case.order_id},
    )
    client.force_login(lead)

    response = client.get(reverse(CHANGELIST))

    assert "evt-stranger" not in {e.event_id for e in response.context["cl"].result_list}


def _stored_before(event_id: str, order_id: str, *, account=None, reference=None) -> InboundEvent:
    """An event as an earlier release stored it: its reported reference (the account's, if
    one is given), the account only if given, never the account's team."""
    return InboundEvent.objects.create(
        event_id=event_id,
        type="order.updated",
        order_id=order_id,
        order_version=3,
        occurred_at=timezone.now(),
        account_reference=reference if reference is not None else getattr(account, "reference", ""),
        account=account,
        body={"event_id": event_id, "order_id": order_id},
    )


def test_events_stored_before_the_account_was_kept_get_it_from_their_reference(client, lead, case):
    """``reconciliation`` 0012 sets the account of the events stored before processing kept
    it, by their reference; an event that names no account, or none of ours, stays without
    one (and is a superuser's to see)."""
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    named, unknown, pending = (
        _stored_before("evt-a", case.order_id, reference=case.account.reference),
        _stored_before("evt-b", case.order_id, reference="ACC-404"),
        _stored_before("evt-c", case.order_id),
    )
    client.force_login(lead)
    assert not client.get(reverse(CHANGELIST)).context["cl"].result_list

    migration = import_module("reconciliation.migrations.0012_inboundevent_account")
    assert migration.link_accounts(apps, SimpleNamespace(connection=connection)) == 1

    named.refresh_from_db(), unknown.refresh_from_db(), pending.refresh_from_db()
    assert (named.account, unknown.account, pending.account) == (case.account, None, None)
    # 0017, after it, gives the account's team.
    later = import_module("reconciliation.migrations.0017_inboundevent_account_team")
    assert later.set_teams(apps, SimpleNamespace(connection=connection)) == 1
    # And 0018 whether a case of that account is on the order.
    last = import_module("reconciliation.migrations.0018_inboundevent_on_case")
    assert last.set_on_case(apps, SimpleNamespace(connection=connection)) == 1
    listed = {e.event_id for e in client.get(reverse(CHANGELIST)).context["cl"].result_list}
    assert listed == {"evt-a"}


def test_the_teams_of_events_stored_before_are_set_and_who_sees_what_does_not_change(
    client, lead, outsider, team_event, case, other_team
):
    """``reconciliation`` 0017 gives each event whose account is known its account's team; an
    event without an account stays without one. After it, who sees which event is as it was
    before the team was kept: the team only spares the look for a case of another team's
    account."""
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    from cases.models import CustomerAccount

    stranger = CustomerAccount.objects.create(reference="ACC-901", name="Other", team=other_team)

    old_own, old_other, old_pending = (
        _stored_before("evt-old-own", case.order_id, account=case.account),
        _stored_before("evt-old-other", case.order_id, account=stranger),
        _stored_before("evt-old-pending", case.order_id),
    )

    def seen(user) -> set[str]:
        client.force_login(user)
        return {e.event_id for e in client.get(reverse(CHANGELIST)).context["cl"].result_list}

    # Without its team, an event is no team's yet (an operator's to see, as one without an
    # account): the lead does not see its own account's old event.
    assert (seen(lead), seen(outsider)) == ({"evt-review-1"}, set())

    migration = import_module("reconciliation.migrations.0017_inboundevent_account_team")
    assert migration.set_teams(apps, SimpleNamespace(connection=connection)) == 2
    # And 0018, after it, whether a case of the account is on the order.
    last = import_module("reconciliation.migrations.0018_inboundevent_on_case")
    assert last.set_on_case(apps, SimpleNamespace(connection=connection)) == 2

    for event in (old_own, old_other, old_pending):
        event.refresh_from_db()
    assert (old_own.account_team, old_other.account_team, old_pending.account_team) == (
        case.team,
        other_team,
        None,
    )
    # As the rule was: the lead's account's event on the lead's case's order; nothing of the
    # other team's account (no case of it is on that order).
    assert (seen(lead), seen(outsider)) == ({"evt-review-1", "evt-old-own"}, set())


def test_a_case_is_in_its_accounts_team_and_an_accounts_team_does_not_change(
    client, lead, case, other_team
):
    """What ``inbound_events_for`` passes over by the event's ``account_team`` rests on this:
    a case is opened in its account's team, and a lead's change of an account leaves its team
    as it was (the field is shown, not offered)."""
    account = case.account
    assert case.team_id == account.team_id
    client.force_login(lead)
    url = reverse("admin:cases_customeraccount_change", args=[account.pk])
    page = client.get(url)
    assert page.status_code == 200
    assert 'name="team"' not in page.content.decode()
    client.post(
        url,
        {
            "name": account.name,
            "email": account.email,
            "team": other_team.pk,
            "change_reason": "Moving the account",
        },
    )
    account.refresh_from_db()
    assert account.team_id == case.team_id
