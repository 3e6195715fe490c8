"""Review: no HTTP inside an open transaction. The admin's delete (= revoke) view is wrapped in
``transaction.atomic`` by Django's ``ModelAdmin.delete_view``; ``delete_model`` -> ``case_revoke``
-> ``_raise_fence`` then calls the order system while that outer transaction (and the case row
lock taken by the nested revocation) is still open."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import TestCase
from django.urls import reverse

from cases.kernel import Worker
from reconciliation.claims import case_claim
from reconciliation.client import OrderSystemClient

pytestmark = pytest.mark.order_system


def test_admin_delete_raises_the_fence_outside_any_transaction(
    approved_case, live_orders, lead, client, monkeypatch
):
    case = approved_case()
    case_claim(case_id=case.pk, worker=Worker("worker:review:del"))  # a running attempt
    baseline = len(connection.atomic_blocks)  # the test's own wrapping transaction(s)
    seen = []
    real_fence = OrderSystemClient.fence

    def fence(self, order_id, token):
        seen.append(len(connection.atomic_blocks))
        return real_fence(self, order_id, token)

    monkeypatch.setattr(OrderSystemClient, "fence", fence)
    client.force_login(lead)

    # The test's own transaction never commits: run what the commit would run.
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = client.post(reverse("admin:cases_case_delete", args=[case.pk]), {"post": "yes"})

    assert response.status_code == 302
    case.refresh_from_db()
    assert case.revoked_at is not None
    assert seen, "the revocation raised no fence"
    assert seen == [baseline] * len(seen), (
        f"fence HTTP call made {seen[0] - baseline} transaction level(s) deep"
    )
