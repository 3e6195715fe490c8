"""``make bench``'s claim goal counts one commit per claim in the steady state of a worker: a
process's first claims (the database's identity learned, the claim's statement prepared on the
server, each a transaction of its own) are made before its window. Measured on a fresh
connection and a process that knows no database yet, the first window counts exactly one commit
per claim, by id and next due."""

from __future__ import annotations

import io
import uuid

import pytest
from django.db import connection

from lab.bench import claims
from lab.bench.context import Run
from lab.bench.postgres import reading_overhead
from reconciliation import claims as product_claims

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def test_a_first_window_of_claims_counts_one_commit_per_claim(tmp_path, monkeypatch):
    connection.close()  # nothing prepared on the connection the window uses
    monkeypatch.setattr(product_claims, "_known_identity", {})  # nor any database known
    run = Run(
        db_name=connection.settings_dict["NAME"],
        run_id=uuid.uuid4().hex[:8],
        log_dir=tmp_path,
        idle_seconds=0,
        e2e_mode="test",
        out=io.StringIO(),
        overhead=reading_overhead(),
    )

    assert claims.claims_by_id(run, 30) > 0
    assert claims.claims_next_due(run, 30) > 0

    assert run.series["commits"].values == [1.0]
    assert run.series["next_commits"].values == [1.0]
    assert run.series["queries"].values == [1.0]
    assert run.series["next_queries"].values == [1.0]


def test_the_raw_anchor_claims_every_row_once_whether_its_commits_wait_or_not():
    """The goal's anchor waits for each commit's flush; the one printed beside it does not, as
    Holdfast's claim's own commit. Each claims every ready row exactly once (a row left or
    claimed twice is a Skip, not a rate)."""
    from lab.bench import anchors

    try:
        for asynchronous in (False, True):
            assert anchors.raw_claims(60, 1, asynchronous=asynchronous) > 0
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT count(*), count(*) FILTER (WHERE state = 'claimed') "  # noqa: S608
                    f"FROM {anchors.RAW_TABLE}"
                )
                assert cursor.fetchone() == (60, 60)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {anchors.RAW_TABLE}")
