"""Count what a block of code costs the database: statements, and transactions as PostgreSQL
counts them (``xact_commit``): each commit of an atomic block, and each statement run outside
one (autocommit: a transaction of its own, reads included)."""

from __future__ import annotations

import contextlib
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
