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
        # as processing read it from the order system, and our account of it
        account_reference=case.account.reference,
        account=case.account,
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
        body={"event_id": "evt-stranger", "order_id": case.order_id},
    )
    client.force_login(lead)

    response = client.get(reverse(CHANGELIST))

    assert "evt-stranger" not in {e.event_id for e in response.context["cl"].result_list}


def test_events_stored_before_the_account_was_kept_get_it_from_their_reference(client, lead, case):
    """``reconciliation`` 0012 sets the account of the events stored before processing kept
    it, by their reference; an event that names no account, or none of ours, stays without
    one (and is a superuser's to see)."""
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    def stored(event_id: str, reference: str) -> InboundEvent:
        return InboundEvent.objects.create(
            event_id=event_id,
            type="order.updated",
            order_id=case.order_id,
            order_version=3,
            occurred_at=timezone.now(),
            account_reference=reference,
            body={"event_id": event_id, "order_id": case.order_id},
        )

    named, unknown, pending = (
        stored("evt-a", case.account.reference),
        stored("evt-b", "ACC-404"),
        stored("evt-c", ""),
    )
    client.force_login(lead)
    assert not client.get(reverse(CHANGELIST)).context["cl"].result_list

    migration = import_module("reconciliation.migrations.0012_inboundevent_account")
    assert migration.link_accounts(apps, SimpleNamespace(connection=connection)) == 1

    named.refresh_from_db(), unknown.refresh_from_db(), pending.refresh_from_db()
    assert (named.account, unknown.account, pending.account) == (case.account, None, None)
    listed = {e.event_id for e in client.get(reverse(CHANGELIST)).context["cl"].result_list}
    assert listed == {"evt-a"}
