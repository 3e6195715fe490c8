"""The drill report: ``var/drills/drill-<time>.json`` and ``.html``, and a ``DrillRun`` row."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from lab.drills.runner import FAIL, PASS, ScenarioResult


def report_dir() -> Path:
    return Path(settings.BASE_DIR) / "var" / "drills"


def write_report(results: list[ScenarioResult], meta: dict, *, directory: Path | None = None):
    from lab.models import DrillRun

    directory = directory or report_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stamp = parse_datetime(meta["started_at"]) or timezone.now()
    base = directory / f"drill-{stamp:%Y%m%d-%H%M%S}"
    counts = {
        "passed": sum(r.outcome == PASS for r in results),
        "failed": sum(r.outcome == FAIL for r in results),
        "other": sum(r.outcome not in (PASS, FAIL) for r in results),
    }
    data = {**meta, **counts, "results": [r.as_json() for r in results]}
    json_path, html_path = base.with_suffix(".json"), base.with_suffix(".html")
    json_path.write_text(json.dumps(data, indent=2))
    html_path.write_text(render_to_string("admin/lab/drillrun/report.html", data))
    run = DrillRun.objects.create(
        started_at=stamp,
        finished_at=parse_datetime(meta.get("finished_at", "")) or timezone.now(),
        results=data["results"],
        passed=counts["passed"],
        failed=counts["failed"],
        other=counts["other"],
        order_system_url=meta.get("order_system", ""),
        json_path=str(json_path),
        html_path=str(html_path),
    )
    return run, json_path, html_path


def table(results: list[ScenarioResult]) -> str:
    """A Markdown table of the results (for a closing note)."""
    lines = ["| scenario | outcome | seconds |", "|---|---|---|"]
    lines += [f"| {r.name} | {r.outcome} | {r.seconds:.1f} |" for r in results]
    return "\n".join(lines)
