"""Holdfast's claims, sequentially on N ready cases: ``case_claim`` by id, and (when it exists)
``claim_next_due``, the claim a worker makes of the next due case.

Queries per claim (``CaptureQueriesContext``) and commits per claim
(``pg_stat_database.xact_commit``, minus the reading's own). Every seeding is followed by
``VACUUM (ANALYZE)`` of the tables it wrote, what a served database's autovacuum does (it is off
on this machine's PostgreSQL): without statistics the claim's approval lookup is planned as a
walk over every live approval, which grows by the cases of every round (the claim rate then fell
round after round: 84 → 30 → 18 claims/s); without the vacuum the claims and every update
between rounds leave dead row versions in the cases' indexes that each next-due pick steps over
(227 → 206 → 176 next-due claims/s over three rounds).

A process's first claims are not a worker's steady state, and are made before the clock starts
(:data:`WARM_CLAIMS`): the first claim on a database learns its identity (one statement more,
its own commit), and the claim's statement is prepared on the server at its sixth run
(``DB_PREPARE_THRESHOLD``, 5), a Parse that PostgreSQL runs, and counts, as a transaction of
its own. Counted in the window, they read as 152 commits for 150 claims in a process's first
window and 150 in every later one (the server's statement log of such a window: 151 claim
statements, nothing else, from any session).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from lab.bench.context import Run
from lab.bench.postgres import planned_as_a_worker, settled_xact_commit, xact_commit
from lab.bench.seeding import neutralise, quiet, ready_cases
from lab.bench.series import Skip

# Django's query log also holds the transaction control it issued (BEGIN, COMMIT, savepoints):
# those are not queries; the commits are counted apart (xact_commit).
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")
_SHOWN: set[str] = set()  # the labels whose queries were printed once
# Claims before each timed window: one more than the prepare threshold, so the statement is
# prepared (and the database's identity learned) before the clock and the commit count start.
WARM_CLAIMS = 7


def statements(captured: list[dict[str, Any]], out: Any, label: str) -> int:
    """The queries among ``captured`` (transaction control left out); the kinds of the first
    claim's are printed once so the count can be checked."""
    # A statement bound on the server (the claim's read) is logged without its text.
    sql = [q["sql"] or "(prepared)" for q in captured]
    sql = [text for text in sql if not text.upper().startswith(_CONTROL)]
    if label not in _SHOWN:
        _SHOWN.add(label)
        kinds = [" ".join(text.split()[:3]) for text in sql[: max(1, len(sql) // 20)]]
        out.write(f"  {label}: queries of one claim: {'; '.join(kinds)}")
    return len(sql)


def claims_by_id(run: Run, count: int) -> float:
    with planned_as_a_worker():
        return _claims_by_id(run, count)


def _claims_by_id(run: Run, count: int) -> float:
    from cases.kernel import Worker
    from reconciliation.claims import case_claim

    s = run.series
    sample = min(count, 20)
    ids = ready_cases(run, WARM_CLAIMS + count + sample)
    warm, timed, counted = ids[:WARM_CLAIMS], ids[WARM_CLAIMS:-sample], ids[-sample:]
    worker = Worker("bench")
    for pk in warm:
        case_claim(case_id=pk, worker=worker)
    before = settled_xact_commit()
    start = time.perf_counter()
    for pk in timed:
        case_claim(case_id=pk, worker=worker)
    elapsed = time.perf_counter() - start
    commits = xact_commit() - before - run.overhead.xact_commit_reading
    # With DEBUG the log is a deque of 9000: once full, the context's slice is wrong.
    connection.queries_log.clear()
    with CaptureQueriesContext(connection) as queries:
        for pk in counted:
            case_claim(case_id=pk, worker=worker)
    neutralise(ids)
    s["queries"].add(statements(queries.captured_queries, run.out, "case_claim") / sample)
    s["commits"].add(commits / count)
    return count / elapsed


def next_due_claimer() -> Callable[..., Any] | None:
    """``reconciliation.claims.claim_next_due`` if it exists."""
    from reconciliation import claims

    found = getattr(claims, "claim_next_due", None)
    return found if callable(found) else None


def claims_next_due(run: Run, count: int) -> float:
    """``claim_next_due`` on ``count`` due ready cases (and nothing else due)."""
    with planned_as_a_worker():
        return _claims_next_due(run, count)


def _claims_next_due(run: Run, count: int) -> float:
    from cases.kernel import Worker

    claim_next_due = next_due_claimer()
    if claim_next_due is None:
        raise Skip("reconciliation.claims.claim_next_due does not exist")
    kwargs: dict[str, Any] = {}
    if "source_checked" in inspect.signature(claim_next_due).parameters:
        # As case_claim: the comparison with the order system is the worker's, not the claim's.
        kwargs["source_checked"] = True
    sample = min(count, 20)
    quiet()
    ids = ready_cases(run, WARM_CLAIMS + count + sample, due=True)
    worker = Worker("bench")
    taken: list[int] = []

    def claim() -> None:
        result = claim_next_due(worker=worker, **kwargs)
        attempt = getattr(result, "attempt", result)  # Claimed or Attempt
        if attempt is None:
            raise Skip(f"claim_next_due found nothing due after {len(taken)} claims")
        taken.append(attempt.case_id)

    try:
        for _ in range(WARM_CLAIMS):
            claim()
        before = settled_xact_commit()
        start = time.perf_counter()
        for _ in range(count):
            claim()
        elapsed = time.perf_counter() - start
        commits = xact_commit() - before - run.overhead.xact_commit_reading
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as queries:
            for _ in range(sample):
                claim()
        left = claim_next_due(worker=worker, **kwargs)
    finally:
        neutralise(ids)
    if left is not None:
        raise Skip("claim_next_due claimed a case the bench did not make due")
    if sorted(taken) != sorted(ids):
        raise Skip("claim_next_due took other cases than the due ones")
    run.series["next_queries"].add(
        statements(queries.captured_queries, run.out, "claim_next_due") / sample
    )
    run.series["next_commits"].add(commits / count)
    return count / elapsed
