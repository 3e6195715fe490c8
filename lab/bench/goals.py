"""Issue 27's eight goals, each met, NOT met or not measured (with the reason), with its ratio
of medians and the spread of the per-round ratios:

1. the end-to-end safe apply ≥ 0.8× the bare write, every order changed exactly once;
2. the end-to-end safe apply ≥ 3× a DBOS workflow doing the same write (queued, same
   concurrency);
3. Holdfast's CPU per apply (its workers and its PostgreSQL backends) ≤ 2× a django-q2 no-op
   task's;
4. a claim ≥ 0.5× a raw ``SKIP LOCKED`` claim, in one commit;
5. approve → done p50 ≤ 100 ms and p99 ≤ 400 ms, the workers idle;
6. every admin and API list and search at 1M cases ≤ 1.3× its time at 10k, p95 ≤ 500 ms,
   with a constant query count;
7. under load (20 users on gunicorn while workers apply): admin p95 ≤ 300 ms, API p95 ≤ 150
   ms, no error; the apply rate with and without the load;
8. a worker's RSS after 10k applies within 10% of its RSS after the first 1k.

Each takes the run's series (``lab.bench.series.all_series``); the list pages' outcome comes
from ``lab.bench.lists`` (``ListsOutcome``).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.bench.series import Series, ratio_value

E2E_VS_BARE = 0.8
E2E_VS_DBOS = 3.0
CPU_VS_NOOP = 2.0
CLAIM_VS_RAW = 0.5
APPROVE_P50_MS, APPROVE_P99_MS = 100.0, 400.0
LOAD_ADMIN_P95_MS, LOAD_API_P95_MS = 300.0, 150.0
RSS_GROWTH = 0.10


@dataclass
class ListsOutcome:
    """The list pages' part of a run: printable lines, whether every page met the goal (None:
    not measured), why not measured, and the worst page's figures."""

    lines: list[str]
    met: bool | None
    skipped: str = ""
    worst: str = ""


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "NOT met")


def line(number: int, ok: bool | None, title: str, figure: str) -> str:
    return f"[{verdict(ok)}] ({number}) {title}: {figure}"


def per_round(a: Series, b: Series) -> list[float]:
    """The ratio of each round's values (rounds where both were measured, in order)."""
    return [x / y for x, y in zip(a.values, b.values, strict=False) if y]


def spread(values: list[float], digits: int = 2, unit: str = "×") -> str:
    if not values:
        return "no round"
    if len(values) == 1:
        return "1 round"
    return f"per round {min(values):.{digits}f}–{max(values):.{digits}f}{unit}"


def missing(*series: Series) -> str:
    """Why the first unmeasured of ``series`` was not measured."""
    for one in series:
        if not one.values:
            return f"not measured: {one.skipped or 'no value'}"
    return ""


def rate_goal(number: int, title: str, a: Series, b: Series, floor: float, extra: str = "") -> str:
    """A goal ``a / b ≥ floor``: the ratio of the medians, the spread, both medians."""
    found = ratio_value(a, b)
    if found is None:
        return line(number, None, title, missing(a, b) or "no value")
    figure = f"{found:.2f}× ({spread(per_round(a, b))}): {a.text(1)} vs {b.text(1)}" + (
        f"; {extra}" if extra else ""
    )
    return line(number, found >= floor, title, figure)


def e2e_vs_bare(s: dict[str, Series]) -> str:
    return rate_goal(
        1,
        f"end-to-end safe apply ≥ {E2E_VS_BARE}× the bare write",
        s["e2e"],
        s["bare"],
        E2E_VS_BARE,
        "every order changed exactly once (the order system's records, checked each run)",
    )


def e2e_vs_dbos(s: dict[str, Series]) -> str:
    return rate_goal(
        2,
        f"end-to-end safe apply ≥ {E2E_VS_DBOS:.0f}× a DBOS workflow doing the same write "
        "(queued, same concurrency)",
        s["e2e"],
        s["dbos"],
        E2E_VS_DBOS,
        "every order changed exactly once by each",
    )


def holdfast_cpu(s: dict[str, Series]) -> Series:
    """Holdfast's own CPU per apply, per round: its workers plus its PostgreSQL backends."""
    workers, backends = s["cpu workers"], s["cpu its PostgreSQL"]
    return Series("ms", [w + b for w, b in zip(workers.values, backends.values, strict=False)])


def noop_cpu(s: dict[str, Series]) -> Series:
    """A no-op task's CPU per round: the mean of its readings before and after the round's
    end-to-end run when every round has both, else the one after."""
    after, before = s["cpu noop"].values, s["cpu noop before"].values
    if before and len(before) == len(after):
        return Series("ms", [(a + b) / 2 for a, b in zip(after, before, strict=True)])
    return s["cpu noop"]


def cpu_goal(s: dict[str, Series]) -> str:
    title = f"Holdfast CPU per apply (workers + its PostgreSQL) ≤ {CPU_VS_NOOP:.0f}× a no-op task's"
    own, noop = holdfast_cpu(s), noop_cpu(s)
    found = ratio_value(own, noop)
    if found is None:
        why = missing(s["e2e"], s["cpu workers"], s["cpu noop"]) or "no value"
        return line(3, None, title, why)
    figure = f"{found:.2f}× ({spread(per_round(own, noop))}): {own.text(2)} vs {noop.text(2)}"
    return line(3, found <= CPU_VS_NOOP, title, figure)


def claim_goal(s: dict[str, Series]) -> str:
    """The next-due claim when it was measured (the claim a worker makes), else by id."""
    use_next = bool(s["next"].values)
    claim, queries, commits = (
        (s["next"], s["next_queries"], s["next_commits"])
        if use_next
        else (s["claim"], s["queries"], s["commits"])
    )
    which = "claim_next_due" if use_next else "case_claim"
    title = f"claim ≥ {CLAIM_VS_RAW}× raw SQL SKIP LOCKED, 1 commit"
    found = ratio_value(claim, s["raw1"])
    if found is None or not commits.values or not queries.values:
        return line(4, None, title, missing(claim, s["raw1"], commits) or "no value")
    ok = found >= CLAIM_VS_RAW and round(commits.median, 2) <= 1
    figure = (
        f"{which} {found:.2f}× ({spread(per_round(claim, s['raw1']))}), "
        f"{queries.median:.1f} queries, {commits.median:.2f} commits per claim"
    )
    beside = ratio_value(claim, s["raw1_async"])
    if beside is not None:
        # The claim's own commit does not wait for the disk; the anchor's does. Beside it, the
        # raw claim committed the same way.
        figure += f"; {beside:.2f}× the raw claim committed as it is, not waiting for the disk"
    return line(4, ok, title, figure)


def approve_goal(s: dict[str, Series]) -> str:
    title = (
        f"approve → done p50 ≤ {APPROVE_P50_MS:.0f} ms, p99 ≤ {APPROVE_P99_MS:.0f} ms, idle workers"
    )
    p50, p99, worst = s["approve_p50"], s["approve_p99"], s["approve_max"]
    if not p50.values or not p99.values:
        return line(5, None, title, missing(p50, p99) or "no value")
    ok = p50.median <= APPROVE_P50_MS and p99.median <= APPROVE_P99_MS
    figure = (
        f"p50 {p50.text(0)}, p99 {p99.text(0)}, max {worst.text(0)} "
        f"({p50.median / APPROVE_P50_MS:.2f}× and {p99.median / APPROVE_P99_MS:.2f}× the limits)"
    )
    return line(5, ok, title, figure)


def lists_goal(lists: ListsOutcome) -> str:
    title = "every admin/API list and search at 1M ≤ 1.3× its time at 10k, p95 ≤ 500 ms"
    if lists.met is None:
        return line(6, None, title, f"not measured: {lists.skipped or 'no value'}")
    figure = ("all pages within" if lists.met else "some page missed (see above)") + (
        f"; {lists.worst}" if lists.worst else ""
    )
    return line(6, lists.met, title, figure)


def load_goal(s: dict[str, Series]) -> list[str]:
    title = (
        f"under load (20 users, gunicorn, workers applying): admin p95 ≤ "
        f"{LOAD_ADMIN_P95_MS:.0f} ms, API p95 ≤ {LOAD_API_P95_MS:.0f} ms, 0 errors"
    )
    admin, api, errors = s["load_admin_p95"], s["load_api_p95"], s["load_errors"]
    if not admin.values or not api.values or not errors.values:
        return [line(7, None, title, missing(admin, api, errors) or "no value")]
    ok = (
        admin.median <= LOAD_ADMIN_P95_MS
        and api.median <= LOAD_API_P95_MS
        and max(errors.values) == 0
    )
    figure = (
        f"admin p95 {admin.text(0)}, API p95 {api.text(0)}, errors {errors.text(0)} "
        f"({admin.median / LOAD_ADMIN_P95_MS:.2f}× and {api.median / LOAD_API_P95_MS:.2f}× "
        "the limits)"
    )
    rates = (
        f"    apply rate during the load {s['load_e2e'].text(1)} vs without it {s['e2e'].text(1)}"
    )
    return [line(7, ok, title, figure), rates]


def memory_goal(s: dict[str, Series]) -> str:
    title = f"worker RSS after 10k applies within {RSS_GROWTH:.0%} of after the first 1k"
    first, last = s["rss_1k"], s["rss_10k"]
    found = ratio_value(last, first)
    if found is None:
        return line(8, None, title, missing(first, last) or "no value")
    growth = found - 1
    rounds = [b / a - 1 for a, b in zip(first.values, last.values, strict=False) if a]
    figure = f"{growth:+.1%} ({spread(rounds, 3, '')}): {last.text(1)} vs {first.text(1)}"
    return line(8, growth <= RSS_GROWTH, title, figure)


def goals(s: dict[str, Series], lists: ListsOutcome) -> list[str]:
    return [
        e2e_vs_bare(s),
        e2e_vs_dbos(s),
        cpu_goal(s),
        claim_goal(s),
        approve_goal(s),
        lists_goal(lists),
        *load_goal(s),
        memory_goal(s),
    ]
