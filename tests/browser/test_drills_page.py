"""The Drills page: a lead finds the last drill run from the admin home, sees its pass and fail
counts, opens its HTML report and reads the scenario table, on a desktop and a phone."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from lab.drills.report import write_report
from lab.drills.runner import FAIL, PASS, SKIP, ScenarioResult
from tests.browser.conftest import DESKTOP, PHONE, assert_fits, login, shot

pytestmark = [pytest.mark.browser, pytest.mark.order_system]


def _record_runs(tmp_path):
    """Two past runs, as ``manage.py drill`` records them (its own report writer)."""
    started = timezone.now() - dt.timedelta(hours=2)
    older = [ScenarioResult("two_workers_claiming", "Two workers claim", "One wins.", FAIL, 3.0)]
    write_report(older, {"started_at": started.isoformat(), "order_system": "http://os"},
                 directory=tmp_path)  # fmt: skip
    last = [
        ScenarioResult(
            "restore_older_backup",
            "Restore of an older backup after the order changed",
            "The replacement checks the pending operation against the source first.",
            PASS,
            4.9,
            case="D-7",
            evidence=["ok: the order system holds exactly one DATE-7-1"],
        ),
        ScenarioResult("two_workers_claiming", "Two workers claim", "One wins.", PASS, 2.1),
        ScenarioResult(
            "delayed_not_found",
            "A delayed not found",
            "Stays held.",
            FAIL,
            7.5,
            evidence=["FAILED: the consistent lookup proves it applied"],
        ),
        ScenarioResult("redis_worker_death", "Redis broker", "Re-driven.", SKIP, 0.1),
    ]
    meta = {
        "started_at": (started + dt.timedelta(hours=1)).isoformat(),
        "finished_at": (started + dt.timedelta(hours=1, seconds=15)).isoformat(),
        "order_system": "http://127.0.0.1:8100",
        "sandbox_order": "ORD-PROBE",
    }
    run, _, _ = write_report(last, meta, directory=tmp_path)
    return run


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_a_lead_reads_the_last_drill_run_and_its_report(open_page, staff, tmp_path, viewport):
    run = _record_runs(tmp_path)
    page = open_page(viewport)
    login(page, "lead")

    page.goto("/admin/")
    page.get_by_role("link", name="Drill runs").first.click()
    page.wait_for_load_state()
    shot(page, "drill-runs")
    assert page.url.endswith("/admin/lab/drillrun/")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2
    newest = rows.first  # the last run comes first
    cells = [c.strip() for c in newest.locator("td, th").all_inner_texts()]
    # started, passed, failed, other, seconds, report
    assert cells[1:5] == ["2", "1", "1", "15"], cells
    assert_fits(page)

    newest.get_by_role("link", name="HTML report").click()
    page.wait_for_load_state()
    shot(page, "drill-report")
    assert page.url.endswith(f"/admin/lab/drillrun/{run.pk}/report/")
    summary = page.locator("body").inner_text()
    assert "2 passed, 1 failed, 1 skipped or not implemented" in summary
    table = page.locator("table").first
    scenarios = table.locator("tbody tr")
    assert scenarios.count() == 4
    first = scenarios.first.inner_text()
    assert "restore_older_backup" in first
    assert "PASS" in first
    assert "case D-7" in first
    assert "exactly one DATE-7-1" in first
    failed = scenarios.nth(2).inner_text()
    assert "delayed_not_found" in failed
    assert "FAIL" in failed
    assert "SKIP" in scenarios.nth(3).inner_text()
    assert_fits(page)
