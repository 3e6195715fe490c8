"""The alert rules load, fire when they should, and watch only what ``/metrics`` exports.

``deploy/prometheus/holdfast-alerts.yml`` is checked two ways: Prometheus's own ``promtool``
(``check rules``, then ``test rules`` with ``holdfast-alerts.test.yml``, which feeds each alert
series and expects it to fire or not), and a parser test that every metric an expression names
is one a real scrape of ``/metrics`` exports, so a renamed metric cannot leave an alert silent.
``promtool`` comes with Debian's ``prometheus`` package (``.ci/run`` installs it); without it
those two tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

RULES_DIR = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
RULES = RULES_DIR / "holdfast-alerts.yml"
RULE_TESTS = RULES_DIR / "holdfast-alerts.test.yml"
# The alerts docs/runbooks.md must explain, one section each.
ALERTS = {
    "HoldfastCaseHeldTooLong",
    "HoldfastCasesNeedAttention",
    "HoldfastFollowUpsOverdue",
    "HoldfastNoWorkerHeartbeat",
    "HoldfastDatabaseUnreadable",
    "HoldfastOrderSystemUnavailable",
    "HoldfastWebhookBacklog",
    "HoldfastNotificationBacklog",
}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing in CI: apt-get install prometheus (.ci/run does)")
        pytest.skip("promtool is missing: apt-get install -y --no-install-recommends prometheus")
    return found


def _rules() -> list[dict]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def _exported(body: str) -> set[str]:
    """Every sample name a scrape can hold, from each family's type (a labelled counter nobody
    incremented yet has its HELP and TYPE but no sample)."""
    names = set()
    for family in text_string_to_metric_families(body):
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def test_every_metric_an_alert_watches_is_exported_by_metrics(db):
    body = Client().get("/metrics").content.decode()
    exported = _exported(body)
    assert "holdfast_cases_open" in exported

    for rule in _rules():
        named = set(re.findall(r"\bholdfast_[a-z_]+\b", rule["expr"]))
        assert named, f"{rule['alert']} watches no Holdfast metric"
        missing = named - exported
        assert not missing, f"{rule['alert']} watches {missing}, which /metrics does not export"


def test_every_alert_has_its_runbook_section(db):
    runbooks = (RULES_DIR.parent.parent / "docs" / "runbooks.md").read_text()
    anchors = set(re.findall(r"^## .*\{#([a-z0-9-]+)\}", runbooks, re.M))
    assert {rule["alert"] for rule in _rules()} == ALERTS
    for rule in _rules():
        anchor = rule["annotations"]["runbook"].partition("#")[2]
        assert anchor in anchors, f"{rule['alert']}: no runbook section #{anchor}"
        assert rule["alert"] in runbooks, f"{rule['alert']} is not named in docs/runbooks.md"


def test_promtool_loads_the_rules():
    result = subprocess.run(  # noqa: S603 - promtool with fixed arguments
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_each_alert_fires_on_its_series_and_not_before():
    result = subprocess.run(  # noqa: S603 - promtool with fixed arguments
        [_promtool(), "test", "rules", RULE_TESTS.name],
        cwd=RULES_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_finds_nothing_to_fix_in_a_scrape(db):
    body = Client().get("/metrics").content
    result = subprocess.run(  # noqa: S603 - promtool with fixed arguments
        [_promtool(), "check", "metrics"], input=body, capture_output=True, check=False
    )
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
