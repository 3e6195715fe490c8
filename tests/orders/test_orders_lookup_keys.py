"""Every applied operation must be found by the consistent lookup."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.orders.helpers import operation_body

pytestmark = pytest.mark.usefixtures("seeded")


def test_a_key_the_lookup_could_not_route_is_refused_before_anything_is_applied(api):
    """``GET /operations/{key}`` must find every applied operation, so keys are limited to
    characters a path segment carries unchanged: a ``/`` is refused as ``invalid_field``."""
    applied = api.apply(operation_body(operation_key="DATE/41/1"))

    assert applied.status_code == 422
    assert applied.json()["error"] == "invalid_field"
    assert api.get("/search/operations", key="DATE/41/1").status_code == 404


def test_every_accepted_operation_key_is_found_by_the_consistent_lookup(api):
    key = "DATE-41-1.retry_2:x"
    assert api.apply(operation_body(operation_key=key)).status_code == 201

    lookup = api.get(f"/operations/{quote(key, safe='')}")
    assert lookup.status_code == 200, lookup.json()
    assert lookup.json()["operation_key"] == key
