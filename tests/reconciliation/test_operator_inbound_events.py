"""The operator's inbound events: the events no team owns yet, without a superuser's login.

An event whose order's account could not be read (the order system down, the usual cause) or
is no account of ours belongs to no team. The webhook backlog alert counts it; only a superuser
could look at it, so the operator who got the alert saw "0 inbound events". The operator role
(in no team) sees those events and processes them again; the team wall stays for the rest.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from reconciliation.models import InboundEvent
from reconciliation.selectors import inbound_events_for, may_see_inbound_events

CHANGELIST = "admin:reconciliation_inboundevent_changelist"


def _event(event_id: str, order_id: str, *, account=None, processing="failed") -> InboundEvent:
    return InboundEvent.objects.create(
        event_id=event_id,
        type="order.updated",
        order_id=order_id,
        order_version=3,
        occurred_at=timezone.now(),
        account_reference=account.reference if account else "",
        account=account,
        account_team=account.team if account else None,
        on_case=True if account else None,  # the account's case is on the order (``case``)
        processing=processing,
        attempts=5,
        last_error="order system unavailable: connection refused",
        body={"event_id": event_id, "order_id": order_id},
    )


@pytest.fixture
def operator(make_user):
    """Runs Holdfast: the operator role, in no team."""
    return make_user("operator", "operator", first_name="Otto", last_name="Operator")


@pytest.fixture
def events(case):
    """Two events of the case's order: one no team owns yet (the order system was down when
    it was processed, so its account was never read) and one the team's."""
    return (
        _event("evt-unowned", case.order_id),
        _event("evt-owned", case.order_id, account=case.account, processing="processed"),
    )


def _listed(client, **params) -> set[str]:
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return {event.event_id for event in response.context["cl"].result_list}


def test_the_operator_sees_the_events_no_team_owns_and_not_a_teams(client, operator, events):
    client.force_login(operator)

    assert _listed(client) == {"evt-unowned"}
    assert _listed(client, processing__exact="failed") == {"evt-unowned"}


def test_the_operator_opens_an_unowned_event_but_not_a_teams(client, operator, events):
    unowned, owned = events
    client.force_login(operator)

    page = client.get(reverse("admin:reconciliation_inboundevent_change", args=[unowned.pk]))
    assert page.status_code == 200
    assert "order system unavailable: connection refused" in page.content.decode()

    refused = client.get(reverse("admin:reconciliation_inboundevent_change", args=[owned.pk]))
    assert refused.status_code in {302, 404}
    assert owned.event_id not in refused.content.decode()


def test_a_lead_still_sees_only_the_teams_events(client, lead, events):
    client.force_login(lead)

    assert _listed(client) == {"evt-owned"}


def test_a_case_page_never_takes_an_unowned_event_for_evidence(operator, lead, events):
    """Only the inbound events page asks for the unowned ones: an order id alone proves
    nothing, so a case's held evidence reads the team's events only, operator or not."""
    from django.contrib.auth.models import Group

    operator.groups.add(Group.objects.get(name="lead"))  # an operator who also leads
    operator = type(operator).objects.get(pk=operator.pk)  # permissions read afresh

    assert set(inbound_events_for(operator).values_list("event_id", flat=True)) == set()
    assert set(inbound_events_for(operator, unowned=True).values_list("event_id", flat=True)) == {
        "evt-unowned"
    }


def test_who_gets_the_page(operator, lead, agent, auditor):
    assert may_see_inbound_events(operator)
    assert may_see_inbound_events(lead)
    assert not may_see_inbound_events(agent)
    assert may_see_inbound_events(auditor)  # the team's, read only


def test_the_operator_processes_an_unowned_event_again(client, operator, events, settings):
    """ "Process again" runs the service on the events the operator's page shows: with the
    order system still down, the unowned event fails once more, with a new attempt counted;
    the team's event is not among them."""
    settings.ORDER_SYSTEM_URL = "http://127.0.0.1:9"  # nothing listens: refused at once
    unowned, owned = events
    client.force_login(operator)

    response = client.post(
        reverse(CHANGELIST),
        {"action": "process_again", "_selected_action": [unowned.pk, owned.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert "Processed again: 1 failed." in response.content.decode()
    unowned.refresh_from_db(), owned.refresh_from_db()
    assert (unowned.processing, unowned.attempts) == ("failed", 6)
    assert unowned.account is None  # still no team's
    assert (owned.processing, owned.attempts) == ("processed", 5)


def _tile(home: str) -> str | None:
    """The home page's "Order events that failed" line: its count, or None when not shown."""
    import re

    found = re.search(
        r'<a href="([^"]*)">Order events that failed</a></th>'
        r'<td style="text-align:right"><strong>([^<]*)</strong>',
        home,
    )
    if found is None:
        return None
    assert found.group(1) == reverse(CHANGELIST) + "?processing__exact=failed"
    return found.group(2)


def test_the_home_page_counts_the_failed_order_events_each_may_open(
    client, operator, lead, agent, events, case
):
    """The operator is told of the failed events no team owns, the lead of the team's; an
    agent, who may not open the page, gets no tile."""
    _event("evt-owned-failed", case.order_id, account=case.account)

    counts = {}
    for user in (operator, lead, agent):
        client.force_login(user)
        home = client.get(reverse("admin:index"))
        assert home.status_code == 200
        counts[user.username] = _tile(home.content.decode())

    assert counts == {"operator": "1", "lead": "1", "agent": None}


def test_the_failed_order_events_count_stops_at_a_thousand(operator):
    from reconciliation.extensions import failed_inbound_count

    InboundEvent.objects.bulk_create(
        InboundEvent(
            event_id=f"evt-{n}",
            type="order.updated",
            order_id="ORD-1",
            order_version=1,
            occurred_at=timezone.now(),
            processing="failed",
            body={},
        )
        for n in range(1001)
    )

    assert str(failed_inbound_count(operator)) == "1,000+"


def test_the_auditor_reads_the_teams_events_and_processes_none(client, auditor, events):
    """The auditor "sees everything of the team" but got a 403 for the order events, and a held
    case's page said no order event had arrived beside a timeline that recorded one."""
    from reconciliation.selectors import may_process_inbound_events

    client.force_login(auditor)

    assert _listed(client) == {"evt-owned"}  # the team's; not the unowned one
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "Process again" not in page
    assert not may_process_inbound_events(auditor)
    unowned, owned = events
    response = client.post(
        reverse(CHANGELIST), {"action": "process_again", "_selected_action": [owned.pk]}
    )
    assert response.status_code in {200, 302, 403}
    owned.refresh_from_db()
    assert owned.attempts == 5  # nothing ran


def test_every_link_on_the_operators_home_page_opens(client, operator, events):
    """Six case tiles counted 0 and led to a bare 403, and an 'Away and back' form offered
    nobody: the operator works no team's cases. The page keeps what they may open."""
    import re

    client.force_login(operator)
    home = client.get(reverse("admin:index")).content.decode()

    links = set(re.findall(r'href="(/admin/[^"#]*)"', home)) - {"/admin/logout/"}
    refused = {link for link in links if client.get(link).status_code == 403}
    assert refused == set()
    assert "Mine to answer now" not in home
    assert 'id="hf-absence"' not in home
    assert _tile(home) == "1"
