"""What Holdfast asks of each PostgreSQL connection it opens (``config.settings``).

No JIT compilation: PostgreSQL compiles a statement whose estimated cost passes
``jit_above_cost``, and the estimate comes from the table statistics, not from the rows. On a
desk whose tables were new, the decision page's approvers (six joins, three people) were
estimated past it, and each asking compiled over a hundred functions, hundreds of milliseconds
of the server's CPU, to read three rows in a fraction of a millisecond.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals import services
from approvals.selectors import eligible_approvers
from tests.approvals.conftest import read_order

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db]


def _plan(sql: str) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]


def test_the_approvers_of_a_proposal_are_read_without_compiling_the_statement(
    make_case, agent, approver, lead, backup
):
    proposal = services.proposal_prepare(case=read_order(make_case()), actor=agent)
    with CaptureQueriesContext(connection) as captured:
        assert [person.username for person in eligible_approvers(proposal)] == ["approver"]
    (query,) = captured.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
    plan = _plan(query["sql"])
    assert "JIT" not in plan, plan["JIT"]

    # The server compiles it when a connection lets it (its own default is on): the statement
    # is one that would have been compiled, where the server can compile at all.
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = on")
            cursor.execute("SET LOCAL jit_above_cost = 0")
            cursor.execute("SELECT pg_jit_available()")
            if not cursor.fetchone()[0]:
                pytest.skip("This PostgreSQL cannot compile statements (no LLVM).")
        assert _plan(query["sql"])["JIT"]["Functions"] > 0
