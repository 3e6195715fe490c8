"""Every event names the version it produced: versions never repeat and end at case.version."""

from __future__ import annotations

import pytest
from django.test import TestCase

from cases.kernel import SYSTEM
from reconciliation.apply import apply_case
from reconciliation.claims import attempts_expire_leases, case_claim
from reconciliation.revocation import case_revoke


def _assert_versions_are_a_sequence(case):
    case.refresh_from_db()
    versions = list(case.events.order_by("id").values_list("version", flat=True))
    assert versions == sorted(set(versions)), versions
    assert versions[-1] == case.version


@pytest.mark.order_system
def test_a_full_apply_produces_one_version_per_event(approved_case):
    case = approved_case()
    assert apply_case(case_id=case.pk) == "done"
    _assert_versions_are_a_sequence(case)


@pytest.mark.order_system
def test_revocation_and_lease_expiry_record_each_fact_at_its_own_version(approved_case, lead):
    import datetime as dt

    from django.utils import timezone

    case = approved_case()
    case_claim(case_id=case.pk, worker=SYSTEM)
    with TestCase.captureOnCommitCallbacks(execute=True):
        case_revoke(case=case, actor=lead, reason="Deleted", kind="deleted")
    attempts_expire_leases(now=timezone.now() + dt.timedelta(hours=1))

    _assert_versions_are_a_sequence(case)
    actions = list(case.events.values_list("action", flat=True))
    for fact in (
        "cases.attempt.cancel_requested",
        "cases.revocation.fenced",
        "cases.attempt.lease_expired",
        "cases.attempt.claim_released",
    ):
        assert fact in actions
