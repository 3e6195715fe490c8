"""The report ``make bench`` prints at the end: each line the median of the rounds with
[min–max], each comparison ending with the ratio of the medians, then the goals
(``lab.bench.goals``)."""

from __future__ import annotations

import os

from lab.bench.cluster import WORKERS
from lab.bench.context import Run
from lab.bench.goals import ListsOutcome, goals, noop_cpu
from lab.bench.series import Series, ratio

CPU_ORDERS_PG = "cpu the order system's"


def clean_writes(run: Run, series: Series) -> Series:
    """The write counts of the rounds no other database burst into, if there are any."""
    clean = [v for v, ok in zip(series.values, run.writes_clean, strict=False) if ok]
    if not clean or len(clean) == len(series.values):
        return series
    return Series(series.unit, clean)


def ceiling(run: Run) -> tuple[float, float] | None:
    """(write commits per apply, pgbench's 4-client rate divided by them), if measured."""
    s = run.series
    writes_series = clean_writes(run, s["e2e_writes"])
    if not s["pg4"].values or not writes_series.values or writes_series.median <= 0:
        return None
    writes = writes_series.median
    return writes, s["pg4"].median / writes


def others_note(run: Run) -> str:
    if all(run.writes_clean):
        return ""
    busiest = sorted(run.others_active.items(), key=lambda item: -item[1])[:3]
    named = ", ".join(f"{name} {count:,} rows" for name, count in busiest) or (
        "server-wide transaction ids grew faster than 5/s in the idle window"
    )
    clean = sum(run.writes_clean)
    used = (
        f"the figures above use the {clean} clean round(s) of {len(run.writes_clean)}"
        if clean
        else "no round was clean: the figures above are unreliable"
    )
    return (
        f"; NOTE other databases wrote during some runs ({named}), and their "
        f"writes take transaction ids too: {used}"
    )


def anchor_lines(s: dict[str, Series]) -> list[str]:
    return [
        f"pgbench -N 4 clients / 1 client: {s['pg4'].text()} vs {s['pg1'].text()} "
        f"… {ratio(s['pg4'], s['pg1'])}",
        f"raw SQL SKIP LOCKED 1 thread / pgbench -N 1 client: {s['raw1'].text()} vs "
        f"{s['pg1'].text()} … {ratio(s['raw1'], s['pg1'])}",
        f"raw SQL SKIP LOCKED 4 threads / pgbench -N 4 clients: {s['raw4'].text()} vs "
        f"{s['pg4'].text()} … {ratio(s['raw4'], s['pg4'])}",
        f"raw SQL SKIP LOCKED 4 threads / 1 thread: {s['raw4'].text()} vs "
        f"{s['raw1'].text()} … {ratio(s['raw4'], s['raw1'])}",
        f"raw SQL SKIP LOCKED 1 thread, commits not waiting for the disk / waiting: "
        f"{s['raw1_async'].text()} vs {s['raw1'].text()} … {ratio(s['raw1_async'], s['raw1'])}",
    ]


def claim_lines(s: dict[str, Series]) -> list[str]:
    lines = [
        f"claim / raw SQL SKIP LOCKED: {s['claim'].text()} (Holdfast case_claim by id, "
        f"sequential) vs {s['raw1'].text()} (1 thread) … {ratio(s['claim'], s['raw1'])}",
        f"  case_claim queries per claim: {s['queries'].text(1)} (goal ≤ 4)",
        f"  case_claim commits per claim: {s['commits'].text(2)} (goal 1)",
    ]
    if not s["next"].values:
        return [*lines, f"next-due claim: not measured ({s['next'].skipped or 'no value'})"]
    return [
        *lines,
        f"next-due claim / raw SQL SKIP LOCKED: {s['next'].text()} (Holdfast "
        f"claim_next_due, sequential) vs {s['raw1'].text()} (1 thread) "
        f"… {ratio(s['next'], s['raw1'])}",
        f"  against the raw claim committed as the claim commits, not waiting for the disk: "
        f"{s['raw1_async'].text()} … {ratio(s['next'], s['raw1_async'])}",
        f"  claim_next_due queries per claim: {s['next_queries'].text(1)} (goal ≤ 4)",
        f"  claim_next_due commits per claim: {s['next_commits'].text(2)} (goal 1)",
    ]


def noop_line(s: dict[str, Series]) -> str:
    return (
        f"django-q2 no-op (ORM broker, {WORKERS} workers) / raw SQL SKIP LOCKED 1 thread: "
        f"{s['noop'].text(1)} vs {s['raw1'].text()} … {ratio(s['noop'], s['raw1'])}"
    )


def cpu_line(s: dict[str, Series]) -> str:
    cores = os.cpu_count() or 1
    return (
        "  CPU per apply (/proc, over each run): the cluster's workers "
        f"{s['cpu workers'].text(2)}, Holdfast's PostgreSQL backends "
        f"{s['cpu its PostgreSQL'].text(2)}, the order system "
        f"{s['cpu order system'].text(2)}, its PostgreSQL backends "
        f"{s[CPU_ORDERS_PG].text(2)}; {s['cpu all'].text(2)} in all: "
        f"{cores} cores could do {cores * 1000 / s['cpu all'].median:,.0f} applies/s "
        "if they did nothing else" + noop_words(s)
    )


def noop_words(s: dict[str, Series]) -> str:
    """What a no-op task costs, as goal 3 compares it: each reading's side of the end-to-end
    run when it was read on both."""
    if not s["cpu noop"].values:
        return ""
    noop = noop_cpu(s)
    sides = (
        f"; the mean of {s['cpu noop before'].text(2)} read before the end-to-end run and "
        f"{s['cpu noop'].text(2)} after it"
        if noop is not s["cpu noop"]
        else ""
    )
    return (
        f"; a django-q2 no-op task costs {noop.text(2)} (its cluster and PostgreSQL "
        f"backends{sides})"
    )


def per_round_line(s: dict[str, Series]) -> str:
    def rounds(series: Series) -> str:
        return ", ".join(f"{value:.2f}" for value in series.values)

    # A round that costs more shows here whole, not only as the range's end.
    return (
        f"  per round, in order: transactions per apply {rounds(s['e2e_xact_raw'])}; "
        f"the workers' CPU per apply {rounds(s['cpu workers'])} ms; applies/s "
        f"{rounds(s['e2e'])}"
    )


def ceiling_line(run: Run, writes: float, rate: float) -> str:
    s = run.series
    clean = sum(run.writes_clean)
    basis = (
        "idle-corrected write commits"
        if clean == len(run.writes_clean)
        else f"idle-corrected write commits, {clean} clean round(s)"
        if clean
        else "idle-corrected write commits, unreliable: no clean round"
    )
    return (
        f"end-to-end safe apply / (pgbench -N 4 clients ÷ write commits per apply): "
        f"{s['e2e'].text(1)} vs {rate:,.0f} applies/s ({s['pg4'].median:,.0f} tps "
        f"÷ {writes:.1f} {basis}) "
        f"… {s['e2e'].median / rate:.3f}×"
    )


def end_to_end_lines(run: Run) -> list[str]:
    s = run.series
    if not s["e2e"].values:
        return [f"end-to-end safe apply: not measured ({s['e2e'].skipped or 'no value'})"]
    lines = [
        f"end-to-end safe apply ({run.e2e_mode}, {WORKERS} workers) / django-q2 no-op: "
        f"{s['e2e'].text(1)} vs {s['noop'].text(1)} (per round "
        f"{s['e2e_vs_noop'].text(3)}) … {ratio(s['e2e'], s['noop'])}",
        "  transactions per apply in Holdfast's database (xact_commit delta, reads "
        f"included): raw {s['e2e_xact_raw'].text(1)}, including the cluster's broker "
        f"polling and sweeper; idle-corrected {s['e2e_xact'].text(1)} (minus the warmed "
        f"idle cluster's {s['idle_xact'].text(1)} × the run's time) (goal ≤ 6)",
        "  write commits per apply, all databases (server-wide transaction ids): raw "
        f"{clean_writes(run, s['e2e_writes_raw']).text(1)}; idle-corrected "
        f"{clean_writes(run, s['e2e_writes']).text(1)} (idle "
        f"{clean_writes(run, s['idle_writes']).text(1)})" + others_note(run),
        "  the order system's own transactions per apply (xact_commit of "
        f"{run.orders_db}): {s['orders_xact'].text(1)}",
    ]
    if s["cpu all"].values:
        lines.append(cpu_line(s))
    if len(s["e2e_xact_raw"].values) > 1:
        lines.append(per_round_line(s))
    if any(run.cluster_enqueued):
        lines.append(
            f"  during the runs the cluster enqueued tasks of its own: "
            f"{', '.join(map(str, run.cluster_enqueued))} per round (the dispatcher "
            "enqueues apply_case for cases due in its pass; the sweeper its successor)"
        )
    found = ceiling(run)
    if found is not None:
        lines.append(ceiling_line(run, *found))
    return lines


def bare_lines(s: dict[str, Series]) -> list[str]:
    if not s["bare"].values:
        return []
    # The order system's side of an apply alone: the end-to-end rate cannot pass it.
    lines = [
        f"bare writes ({WORKERS} bare_writes tasks, one per worker, sending the same "
        "backlog's writes with nothing of Holdfast's around them) / django-q2 no-op: "
        f"{s['bare'].text(1)} vs {s['noop'].text(1)} … {ratio(s['bare'], s['noop'])}",
        f"end-to-end safe apply / bare writes: {s['e2e'].text(1)} vs "
        f"{s['bare'].text(1)} … {ratio(s['e2e'], s['bare'])}",
    ]
    if s["cpu bare all"].values:
        lines.append(
            "  CPU per bare write: the order system and its PostgreSQL backends "
            f"{s['cpu bare order system'].text(2)}; {s['cpu bare all'].text(2)} in all"
        )
    return lines


def multihost_line(s: dict[str, Series]) -> str:
    if not s["multi"].values:
        return f"multi-host end-to-end: not measured ({s['multi'].skipped or 'no value'})"
    return (
        "multi-host (2 network namespaces, Redis broker) end-to-end / django-q2 no-op: "
        f"{s['multi'].text(1)} vs {s['noop'].text(1)} … {ratio(s['multi'], s['noop'])}"
    )


def list_page_lines(lists: ListsOutcome) -> list[str]:
    if not lists.lines:
        return [f"list pages: not measured ({lists.skipped or 'no value'})"]
    return ["", *lists.lines]


def peer_lines(s: dict[str, Series]) -> list[str]:
    """The DBOS anchor, approve → done and the worker's memory, when measured."""
    lines = [
        f"DBOS workflows (the same write, queued at {WORKERS}) / bare writes: "
        f"{s['dbos'].text(1)} vs {s['bare'].text(1)} … {ratio(s['dbos'], s['bare'])}",
        f"approve → done (idle workers, from the approval's transaction to the done event): "
        f"p50 {s['approve_p50'].text(0)}, p99 {s['approve_p99'].text(0)}, "
        f"max {s['approve_max'].text(0)}",
    ]
    if s["rss_1k"].values or s["rss_10k"].values:
        lines.append(
            "worker RSS (the cluster's busiest worker): after the first tenth "
            f"{s['rss_1k'].text(1)}, at the end {s['rss_10k'].text(1)}"
        )
    return lines


def report(run: Run, lists: ListsOutcome, elapsed: float) -> None:
    s = run.series
    lines = [
        "",
        *anchor_lines(s),
        *claim_lines(s),
        noop_line(s),
        *end_to_end_lines(run),
        *bare_lines(s),
        *peer_lines(s),
        multihost_line(s),
        *list_page_lines(lists),
        *([run.machine.line()] if run.machine is not None else []),
        "",
        "GOALS (issue 27; ratios of the medians of this run's rounds, with the per-round spread)",
        *(f"  {line}" for line in goals(s, lists)),
        "",
        f"bench took {elapsed:.0f}s ({elapsed / 60:.1f} min); logs in {run.log_dir}",
    ]
    for line in lines:
        run.write(line)
