"""The work path runs as the README's application role, with the append-only triggers live.

The suite connects as the tables' owner with ``holdfast.maintenance`` on (to empty tables
between tests), which the triggers let through. Here the connection is the role the README's
grant script makes, so every write these paths make -- attempts' states and leases, an
approval's revocation, proposal authors, events -- meets the column grants and the triggers
exactly as in production.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from approvals.models import Approval
from approvals.services import proposal_prepare
from cases.models import Attempt
from reconciliation.apply import apply_case
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.settle import case_reconcile
from reconciliation.sources import source_check
from tests.support.db_roles import roles

pytestmark = [pytest.mark.order_system, pytest.mark.postgres_only]


@pytest.fixture
def as_app_role(transactional_db):
    """Every connection from here on logs in as the README's application role."""
    with roles(writer_tables=("cases_case",)) as names:
        saved = connection.settings_dict["USER"]
        connection.close()
        connection.settings_dict["USER"] = names["app"]
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_user")
                assert cursor.fetchone() == (names["app"],)
            yield names["app"]
        finally:
            connection.close()
            connection.settings_dict["USER"] = saved


def test_a_case_is_approved_applied_and_closed_as_the_app_role(
    as_app_role, approved_case, live_orders
):
    case = approved_case()

    assert apply_case(case_id=case.pk) == "done"

    attempt = Attempt.objects.get(case=case)
    assert attempt.state == Attempt.State.SUCCEEDED
    assert attempt.last_confirmed_step == Attempt.Step.CLOSED


def test_a_changed_source_revokes_the_approval_and_a_person_prepares_anew_as_the_app_role(
    as_app_role, approved_case, live_orders, agent
):
    case = approved_case()
    live_orders.seed(
        orders=[
            {
                "order_id": "ORD-7731",
                "account_id": "ACC-100",
                "delivery_date": "2030-01-01",
                "version": 7,
            }
        ]
    )

    assert apply_case(case_id=case.pk) == "source_changed"

    approval = Approval.objects.get(proposal__case=case)
    assert approval.revoked_at is not None
    assert approval.revoked_reason
    assert source_check(case_id=case.pk) == "checked"
    case.refresh_from_db()
    proposal = proposal_prepare(case=case, actor=agent)
    assert list(proposal.authors.values_list("user", flat=True)) == [agent.pk]


def test_an_unknown_effect_and_an_expired_lease_settle_as_the_app_role(
    as_app_role, approved_case, live_orders, settings
):
    held = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/")
    assert apply_case(case_id=held.pk) == "effect_unknown"
    live_orders.clear_faults()

    assert case_reconcile(case_id=held.pk) == "applied"
    assert apply_case(case_id=held.pk) == "done"  # the steps after the apply resume

    live_orders.seed(
        orders=[{"order_id": "ORD-7732", "account_id": "ACC-100", "delivery_date": "2030-01-02"}]
    )
    stranded = approved_case(order_id="ORD-7732")
    attempt = case_claim(case_id=stranded.pk, worker=_worker())
    assert attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1)) == 1

    attempt.refresh_from_db()
    stranded.refresh_from_db()
    assert attempt.state == Attempt.State.LEASE_EXPIRED
    assert stranded.status == "held"


def _worker():
    from cases.kernel import Worker

    return Worker("worker:app-role")
