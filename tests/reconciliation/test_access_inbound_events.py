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


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def team_event(case):
    """An order event for the order of ``case`` (team Deliveries)."""
    return InboundEvent.objects.create(
        event_id="evt-review-1",
        type="order.updated",
        order_id=case.order_id,
        order_version=3,
        occurred_at=timezone.now(),
        account_reference=case.account.reference,  # as processing read it from the order system
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
