"""Count what a block of code costs the database: statements, and transactions as PostgreSQL
counts them (``xact_commit``): each commit of an atomic block, and each statement run outside
one (autocommit: a transaction of its own, reads included); and the round trips to the server,
as the client library's own protocol trace shows them."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import connection


@dataclass
class Cost:
    statements: list[str] = field(default_factory=list)
    commits: int = 0
    autocommitted: int = 0

    @property
    def queries(self) -> int:
        return len(self.statements)

    @property
    def transactions(self) -> int:
        return self.commits + self.autocommitted


@contextlib.contextmanager
def database_cost() -> Iterator[Cost]:
    """Count this thread's default connection while the block runs."""
    cost = Cost()

    def count(execute, sql, params, many, context):
        cost.statements.append(sql)
        if not connection.in_atomic_block:
            cost.autocommitted += 1
        return execute(sql, params, many, context)

    real_commit = connection.commit

    def commit() -> None:
        cost.commits += 1
        real_commit()

    connection.commit = commit  # type: ignore[method-assign]  # counted, then the real one
    try:
        with connection.execute_wrapper(count):
            yield cost
    finally:
        del connection.commit


@dataclass
class RoundTrips:
    """The messages the server answered with ``ReadyForQuery``, in order: one for each time the
    client waited for it (a statement on its own, a whole pipeline, or a ``BEGIN``/``COMMIT``)."""

    waits: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.waits)


@contextlib.contextmanager
def round_trips() -> Iterator[RoundTrips]:
    """Count this thread's default connection's round trips to PostgreSQL while the block runs,
    from libpq's trace of the protocol (``PQtrace``): each ``ReadyForQuery`` the server sent
    ends one wait of the client. Each wait is named by the first statement the client sent
    for it."""
    result = RoundTrips()
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    from psycopg import pq

    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield result
        finally:
            pgconn.untrace()
            trace.seek(0)
            first = ""
            for line in trace:
                # A message's line; a statement's own line breaks continue it on lines of
                # their own, which are skipped.
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 3 or parts[0] not in ("F", "B"):
                    continue
                direction, _length, message, *rest = [*parts, ""]
                if direction == "F" and message in ("Parse", "Query") and not first:
                    first = rest[0].strip()[:80]
                elif direction == "B" and message == "ReadyForQuery":
                    result.waits.append(first)
                    first = ""
