"""The operator's guide names every gauge the scrape exports (the runbooks' alerts read them):
``holdfast_notifications_pending`` and its age were exported, alerted on, and not in the guide."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "roles" / "operator.md"


@pytest.mark.django_db
def test_every_gauge_the_scrape_exports_is_in_the_operators_guide(client):
    exported = set(
        re.findall(r"^# TYPE (holdfast_\w+) gauge$", client.get("/metrics").content.decode(), re.M)
    )

    documented = set(re.findall(r"`(holdfast_\w+)`", GUIDE.read_text()))

    # prometheus_client's own companions of a counter or histogram (when it was created).
    exported = {name for name in exported if not name.endswith("_created")}
    assert exported, "the scrape exported no gauge"
    assert exported - documented == set()
