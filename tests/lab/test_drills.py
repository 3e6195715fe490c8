"""``manage.py drill`` against a live order system process and real worker processes, on the
test's PostgreSQL database: every scenario passes, the report is written, the run is recorded,
and customer intake still refuses sandbox orders."""

from __future__ import annotations

import contextlib
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from cases.exceptions import InvalidCaseInput
from cases.kernel import SYSTEM
from cases.services import case_open
from lab.drills.deployment import drill_day
from lab.drills.scenarios import SCENARIOS
from lab.models import DrillRun

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]


def _drill(tmp_path, *args: str) -> tuple[str, dict]:
    out = StringIO()
    with contextlib.suppress(SystemExit):  # a failed scenario; the report says which
        call_command("drill", "--order", "ORD-SANDBOX", "--report-dir", str(tmp_path), *args,
                     stdout=out)  # fmt: skip
    reports = sorted(tmp_path.glob("drill-*.json"))
    assert reports, out.getvalue()
    return out.getvalue(), json.loads(reports[-1].read_text())


def test_every_drill_passes_and_is_reported(autonomous, tmp_path, account):
    output, report = _drill(tmp_path)

    outcomes = {r["name"]: r["outcome"] for r in report["results"]}
    # A string, not a tuple: pytest shortens the repr of anything else, and a scenario that
    # failed once under load must say which check failed and what it saw.
    failed = "\n\n".join(
        f"{r['name']}: {r['outcome']}\n{json.dumps(r, indent=1, default=str)}"
        for r in report["results"]
        if r["outcome"] != "PASS"
    )
    assert outcomes == dict.fromkeys((s.name for s in SCENARIOS), "PASS"), f"{failed}\n\n{output}"
    assert f"[1/{len(SCENARIOS)}]" in output  # progress, one line as each starts and ends
    run = DrillRun.objects.get()
    assert (run.passed, run.failed, run.other) == (len(SCENARIOS), 0, 0)
    assert "Drill report" in Path(run.html_path).read_text()
    # Customer intake still refuses the sandbox orders the drills use.
    with pytest.raises(InvalidCaseInput):
        case_open(
            actor=SYSTEM,
            account=account,
            request_key="not-a-drill",
            order_id="ORD-SANDBOX",
            kind="delivery_date",
            change={"kind": "delivery_date", "delivery_date": drill_day(1).isoformat()},
        )


def test_every_change_kind_has_a_fault_drill_and_they_pass(autonomous, tmp_path):
    """Issue 23: the drills run at least one fault scenario per kind (the delivery date kind:
    every scenario before the kinds'). Run alone here, so a failure names its kind."""
    from cases import kinds
    from lab.drills.scenarios import KIND_DRILLS

    covered = {kind for drilled in KIND_DRILLS.values() for kind in drilled} | {"delivery_date"}
    assert covered >= {kind.code for kind in kinds.kinds()}

    output, report = _drill(tmp_path, *KIND_DRILLS)

    outcomes = {r["name"]: r["outcome"] for r in report["results"]}
    failed = "\n\n".join(
        f"{r['name']}: {r['outcome']}\n{json.dumps(r, indent=1, default=str)}"
        for r in report["results"]
        if r["outcome"] != "PASS"
    )
    assert outcomes == dict.fromkeys(KIND_DRILLS, "PASS"), f"{failed}\n\n{output}"
