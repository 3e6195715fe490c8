"""``make bench``'s GOALS: issue 27's eight goals, each met, NOT met or not measured with the
reason, its ratio of the medians and the spread of the per-round ratios. No database: the
arithmetic and the lines, from series as a run fills them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from lab.bench import goals as g
from lab.bench.context import Run
from lab.bench.postgres import Overhead
from lab.bench.report import report
from lab.bench.series import Series, all_series


def _series(**values: list[float]) -> dict[str, Series]:
    s = all_series()
    for name, found in values.items():
        s[name.replace("__", " ")].values = list(found)
    return s


MEASURED = {
    "e2e": [90.0, 100.0, 110.0],
    "bare": [100.0, 110.0, 120.0],
    "dbos": [30.0, 25.0, 40.0],
    "cpu__workers": [4.0, 5.0, 6.0],
    "cpu__its_PostgreSQL": [1.0, 1.0, 1.0],
    "cpu__noop": [3.0, 3.0, 3.0],
    "next": [300.0, 310.0, 320.0],
    "next_queries": [2.0, 2.0, 2.0],
    "next_commits": [1.0, 1.0, 1.0],
    "raw1": [600.0, 620.0, 640.0],
    "approve_p50": [40.0, 50.0, 60.0],
    "approve_p99": [150.0, 200.0, 420.0],
    "approve_max": [160.0, 210.0, 430.0],
    "rss_1k": [100.0, 100.0],
    "rss_10k": [104.0, 112.0],
}


def _measured() -> dict[str, Series]:
    s = _series(**{k: v for k, v in MEASURED.items() if "_Post" not in k})
    s["cpu its PostgreSQL"].values = list(MEASURED["cpu__its_PostgreSQL"])
    return s


LISTS = g.ListsOutcome(["page … 1.1×"], True, "", "worst ratio 1.10× (admin changelist)")


def test_every_goal_has_its_line_in_order_with_a_verdict():
    lines = g.goals(_measured(), LISTS)
    numbered = [line for line in lines if line.startswith("[")]
    assert [line.split("(")[1].split(")")[0] for line in numbered] == list("12345678")
    assert all(line.startswith(("[met]", "[NOT met]", "[not measured]")) for line in numbered)


def test_the_end_to_end_goal_is_the_ratio_of_the_medians_with_the_per_round_spread():
    line = g.e2e_vs_bare(_measured())
    # 100 / 110 = 0.91; the rounds 0.90, 0.91, 0.92
    assert line.startswith("[met] (1)")
    assert "0.91× (per round 0.90–0.92×)" in line
    assert "exactly once" in line
    slow = _measured()
    slow["e2e"].values = [70.0, 80.0, 90.0]
    assert g.e2e_vs_bare(slow).startswith("[NOT met] (1)")  # 80 / 110 = 0.73


def test_the_dbos_goal_needs_three_times_the_peer():
    s = _measured()
    assert g.e2e_vs_dbos(s).startswith("[met] (2)")  # 100 / 30 = 3.33
    s["dbos"].values = [40.0, 40.0, 40.0]
    assert "2.50×" in g.e2e_vs_dbos(s)
    assert g.e2e_vs_dbos(s).startswith("[NOT met] (2)")


def test_an_unmeasured_goal_says_why():
    s = _measured()
    s["dbos"].values = []
    s["dbos"].skipped = "DBOS Transact not installed (pip install '.[bench]')"
    assert g.e2e_vs_dbos(s) == (
        "[not measured] (2) end-to-end safe apply ≥ 3× a DBOS workflow doing the same write "
        "(queued, same concurrency): not measured: DBOS Transact not installed "
        "(pip install '.[bench]')"
    )
    s["e2e"].values, s["e2e"].skipped = [], "--skip-e2e"
    assert g.e2e_vs_bare(s).endswith("not measured: --skip-e2e")


def test_cpu_counts_the_workers_and_their_backends_against_the_no_op():
    line = g.cpu_goal(_measured())
    # (5 + 1) / 3 = 2.0: at the limit is met
    assert line.startswith("[met] (3)")
    assert "2.00× (per round 1.67–2.33×)" in line
    s = _measured()
    s["cpu its PostgreSQL"].values = [2.0, 2.0, 2.0]
    assert g.cpu_goal(s).startswith("[NOT met] (3)")


def test_the_cpu_goal_takes_the_no_op_read_on_both_sides_of_the_end_to_end_run():
    """The machine's speed moves within a run: the no-op's CPU read before the round's end to
    end and after it, their mean is what the round's apply is compared with."""
    from lab.bench.report import noop_words

    s = _measured()
    s["cpu noop before"].values = [5.0, 5.0, 5.0]
    line = g.cpu_goal(s)
    # (5 + 1) / ((3 + 5) / 2) = 1.50; the rounds 5/4, 6/4, 7/4
    assert line.startswith("[met] (3)")
    assert "1.50× (per round 1.25–1.75×)" in line
    assert "vs 4.00 ms" in line
    words = noop_words(s)
    assert words.startswith("; a django-q2 no-op task costs 4.00 ms")
    assert "the mean of 5.00 ms [5.00–5.00] read before the end-to-end run" in words
    assert "3.00 ms [3.00–3.00] after it" in words

    s["cpu noop before"].values = [5.0, 5.0]  # a round without it: the reading after alone
    assert "2.00× (per round 1.67–2.33×)" in g.cpu_goal(s)
    assert "before" not in noop_words(s)
    s["cpu noop"].values = []
    assert noop_words(s) == ""


def test_the_claim_goal_takes_the_next_due_claim_and_wants_one_commit():
    line = g.claim_goal(_measured())
    assert line.startswith("[met] (4)")
    assert "claim_next_due 0.50×" in line
    s = _measured()
    s["next_commits"].values = [2.0, 2.0, 2.0]
    assert g.claim_goal(s).startswith("[NOT met] (4)")


def test_the_claim_goal_shows_beside_it_the_raw_claim_committed_as_the_claim_commits():
    """The claim's own commit does not wait for the disk; the goal's anchor does, and stays the
    verdict's. Beside it, the raw claim committed the same way (measured): its ratio, or
    nothing when it was not measured."""
    assert "not waiting" not in g.claim_goal(_measured())
    s = _measured()
    s["raw1_async"].values = [1200.0, 1240.0, 1280.0]
    line = g.claim_goal(s)
    assert line.startswith("[met] (4)")  # 310 / 620, as without it
    assert "claim_next_due 0.50×" in line
    assert "0.25× the raw claim committed as it is, not waiting for the disk" in line


def test_approve_to_done_needs_both_p50_and_p99():
    line = g.approve_goal(_measured())
    assert line.startswith("[met] (5)")
    assert "p50 50 ms [40–60]" in line
    s = _measured()
    s["approve_p99"].values = [300.0, 450.0, 500.0]
    assert g.approve_goal(s).startswith("[NOT met] (5)")


def test_the_list_goal_reports_the_worst_page_or_why_not_measured():
    assert g.lists_goal(LISTS).startswith("[met] (6)")
    assert "worst ratio 1.10×" in g.lists_goal(LISTS)
    missed = g.ListsOutcome(["…"], False, "", "worst ratio 4.69×")
    assert g.lists_goal(missed).startswith("[NOT met] (6)")
    assert g.lists_goal(g.ListsOutcome([], None, "--skip-lists")).endswith(
        "not measured: --skip-lists"
    )


def test_the_load_goal_is_opt_in_and_reports_the_apply_rate_beside_the_one_without_it():
    s = _measured()
    for name in ("load_admin_p95", "load_api_p95", "load_errors", "load_e2e"):
        s[name].skipped = "opt-in: --load"
    [line] = g.load_goal(s)
    assert line.startswith("[not measured] (7)")
    assert line.endswith("opt-in: --load")
    s["load_admin_p95"].values = [250.0]
    s["load_api_p95"].values = [120.0]
    s["load_errors"].values = [0.0]
    s["load_e2e"].values = [60.0]
    verdict, rates = g.load_goal(s)
    assert verdict.startswith("[met] (7)")
    assert "60.0 applies/s" in rates
    assert "100.0 applies/s" in rates
    s["load_errors"].values = [1.0]
    assert g.load_goal(s)[0].startswith("[NOT met] (7)")


def test_memory_growth_within_ten_percent():
    line = g.memory_goal(_measured())
    # medians 108 / 100: +8.0%; the rounds +4% and +12%
    assert line.startswith("[met] (8)")
    assert "+8.0% (per round 0.040–0.120)" in line
    s = _measured()
    s["rss_10k"].values = [115.0, 120.0]
    assert g.memory_goal(s).startswith("[NOT met] (8)")


def test_the_report_prints_the_goals_under_their_heading(tmp_path: Path):
    out = io.StringIO()

    class Out:
        def write(self, line: str) -> None:
            out.write(line + "\n")

        def flush(self) -> None:
            pass

    s = _measured()
    s["e2e_xact"].values = s["e2e_xact_raw"].values = [5.0]
    run = Run(
        db_name="bench_x",
        run_id="r",
        log_dir=tmp_path,
        idle_seconds=1,
        e2e_mode="m",
        out=Out(),
        overhead=Overhead(commits=0, xids=0, xact_commit_reading=0),
        series=s,
    )
    report(run, LISTS, 60)
    text = out.getvalue()
    heading = text.index("\nGOALS")
    after = text[heading:].splitlines()
    assert [line.strip()[:14] for line in after[2:10]] == [
        "[met] (1) end-",
        "[met] (2) end-",
        "[met] (3) Hold",
        "[met] (4) clai",
        "[met] (5) appr",
        "[met] (6) ever",
        "[not measured]",
        "[met] (8) work",
    ]
    assert "DBOS workflows" in text[:heading]
    assert "approve → done" in text[:heading]


@pytest.mark.parametrize(("values", "p50", "p99"), [([5.0], 5.0, 5.0), ([*range(1, 101)], 50, 99)])
def test_the_percentiles_are_nearest_rank(values, p50, p99):
    from lab.bench.end_to_end import percentile

    assert percentile([float(v) for v in values], 0.5) == p50
    assert percentile([float(v) for v in values], 0.99) == p99
