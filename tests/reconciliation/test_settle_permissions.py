"""Who may settle a held case is the services' rule, not the admin's: called directly, as a
person without the lead permission, reconciling, settling by hand and revoking are refused and
change nothing; the admin only renders what the services would admit."""

from __future__ import annotations

import pytest
from django.urls import reverse

from cases.exceptions import ActionNotPermitted
from cases.models import Case, CaseEvent, Status
from reconciliation.apply import apply_case
from reconciliation.revocation import revocation_offered
from reconciliation.settle import case_reconcile, case_settle_manually

pytestmark = pytest.mark.order_system


def _held(approved_case, live_orders):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    live_orders.clear_faults()
    case.refresh_from_db()
    assert case.status == Status.HELD
    return case


def test_an_agent_calling_case_reconcile_is_refused_and_nothing_moves(
    approved_case, live_orders, agent
):
    case = _held(approved_case, live_orders)
    fence_before = live_orders.state("ORD-7731")["fence_token"]
    last_event = CaseEvent.objects.filter(case=case).order_by("-id").first().pk

    with pytest.raises(ActionNotPermitted):
        case_reconcile(case_id=case.pk, actor=agent)

    case.refresh_from_db()
    assert case.status == Status.HELD
    assert live_orders.state("ORD-7731")["fence_token"] == fence_before  # not even fenced
    assert not CaseEvent.objects.filter(case=case, pk__gt=last_event).exists()


def test_an_agent_calling_case_settle_manually_is_refused(approved_case, live_orders, agent):
    case = _held(approved_case, live_orders)

    with pytest.raises(ActionNotPermitted):
        case_settle_manually(
            case=case,
            actor=agent,
            outcome="applied",
            expected_version=case.version,
            external_reference="TICKET-1",
            summary="The order shows the new date.",
        )

    case.refresh_from_db()
    assert case.status == Status.HELD


def test_a_lead_calling_case_reconcile_settles_it(approved_case, live_orders, lead):
    case = _held(approved_case, live_orders)

    assert case_reconcile(case_id=case.pk, actor=lead) == "applied"


def test_the_held_queue_offers_reconcile_now_to_leads_only(
    client, approved_case, live_orders, lead, agent
):
    _held(approved_case, live_orders)
    url = reverse("admin:cases_heldcase_changelist")

    client.force_login(lead)
    assert 'value="reconcile_now"' in client.get(url).content.decode()
    client.force_login(agent)
    assert 'value="reconcile_now"' not in client.get(url).content.decode()


@pytest.mark.django_db
def test_revocation_is_offered_to_leads_on_cases_with_authority_left(case, lead, agent):
    assert revocation_offered(case, lead)
    assert revocation_offered(None, lead)
    assert not revocation_offered(case, agent)
    assert not revocation_offered(None, agent)

    Case.objects.filter(pk=case.pk).update(status=Status.DONE)
    assert not revocation_offered(Case.objects.get(pk=case.pk), lead)  # nothing left to revoke
