"""Data migrations on the actual service, and the lock rule for large PostgreSQL tables.

The walk (``tests/support/migration_walk.py``) runs in its own process on a scratch database,
so the migrations' own code (which writes through the default connection) meets the data it
was written for: every migration of ``cases``, ``approvals`` and ``reconciliation`` is applied
one at a time with realistic rows inserted between them, read back with today's models, undone
one at a time, and applied again. New migrations are picked up from the migration graph.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection, models
from django.db import migrations as ops
from django.db.migrations.loader import MigrationLoader

from tests.support import migration_lint
from tests.support.migration_lint import Finding, lint_migration, lint_migrations, load_allowlist

ROOT = Path(__file__).resolve().parent.parent


def _child_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    """A migration child process's environment: this one, on ``database_url``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"REDIS_URL", "TEST_DATABASE_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        DATABASE_URL=database_url,
        DJANGO_ENV="test",
        HOLDFAST_STATE_DIR=str(tmp_path / "state"),
        CONN_MAX_AGE="0",
    )
    return env


def _walk(database_url: str, tmp_path: Path) -> dict:
    out = tmp_path / "walk.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.migration_walk", str(out)],
        cwd=ROOT,
        env=_child_env(database_url, tmp_path),
        capture_output=True,
        text=True,
        # A walk that hangs, not one that is slow: it grows with every migration and with the
        # machine (127 s on PostgreSQL, 87 s on SQLite, on a two-core machine running both lanes
        # of `make test`), so 180 s was too close to fail a healthy walk.
        timeout=900,
    )
    assert out.exists(), proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["ok"], report.get("error")
    return report


def _check_walk(report: dict) -> None:
    walked = [step["migration"] for step in report["forward"]]
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    ours = {node for node in graph.nodes if node[0] in migration_lint.PROJECT_APPS}
    assert {tuple(m.split(".", 1)) for m in walked} == ours
    assert [step["migration"] for step in report["forward_again"]][-len(walked) :] == walked
    if not report["irreversible"]:
        assert [step["migration"] for step in report["backward"]] == walked[::-1]
    read = report["forward_read"]
    assert read["counts"]["cases.case"] >= 6 * len(walked) // 2
    assert read["chains"]["events"] == read["counts"]["cases.caseevent"]
    # Intake after the walk: a reference of the account's team's own prefix (cases 0026).
    assert re.fullmatch(r"[A-Z]+-\d+", read["intake"]), read["intake"]


def test_every_migration_walks_forward_back_and_forward_on_sqlite(tmp_path):
    """Each migration applies on rows made by the ones before it, reverses, and applies again."""
    if connection.vendor != "sqlite":
        pytest.skip("walked once, in the SQLite suite (the PostgreSQL walk runs there)")
    report = _walk(f"sqlite:///{tmp_path / 'walk.sqlite3'}", tmp_path)
    _check_walk(report)


def _server_url(database: str) -> str:
    s = connection.settings_dict
    auth = quote(s["USER"] or "")
    if s["PASSWORD"]:
        auth += ":" + quote(s["PASSWORD"])
    host = f"{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"
    return f"postgres://{auth}@{host}/{database}"


def _measured_lock_findings(report: dict) -> set[tuple[str, str, str]]:
    """A migration with a data step that held a write-blocking lock on a big table that
    existed before it: the lock lasts as long as the data step."""
    found = set()
    for step in report["forward"]:
        if not step["data_ops"]:
            continue
        for table, _mode in step["locks"]:
            if migration_lint.is_big(table) and table not in step["created"]:
                found.add((step["migration"], "backfill-under-lock", table))
    return found


@pytest.mark.postgres_only
def test_every_migration_walks_forward_back_and_forward_on_postgresql(tmp_path):
    """The same walk on PostgreSQL, on a database of its own, as the owner of the audit table
    (its append-only trigger is live from 0007); the locks each migration held are read
    before its commit, and a data step under a big table's lock must be on the allowlist."""
    import psycopg

    name = f"holdfast_migwalk_{os.getpid()}"
    admin = _server_url("postgres").replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        report = _walk(_server_url(name), tmp_path)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _check_walk(report)
    allowed = set(load_allowlist())
    static = {finding.key for finding in lint_migrations()}
    unexplained = _measured_lock_findings(report) - allowed - static
    assert not unexplained, sorted(unexplained)


def test_no_new_migration_locks_a_big_table():
    """Every finding of the lock rule is an allowlisted one that predates the rule."""
    allowed = load_allowlist()
    new = [f.describe() for f in lint_migrations() if f.key not in allowed]
    assert not new, "migrations that would lock a big table:\n" + "\n".join(new)


def _lint(*operations, atomic=True) -> set[tuple[str, str]]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    state = loader.project_state()
    migration = type("Migration", (ops.Migration,), {"atomic": atomic})("9999_new", "cases")
    migration.operations = list(operations)
    found = lint_migration(migration, state, migration_lint._pg_connection())
    assert all(isinstance(f, Finding) for f in found)
    return {(f.rule, f.table) for f in found}


def test_lock_rule_flags_each_kind_of_long_lock():
    """Indexes without CONCURRENTLY, validated constraints, rewrites, renames and backfills
    under a schema lock on a big table are found; cheap changes and new tables are not."""
    from django.contrib.postgres.operations import AddIndexConcurrently

    assert _lint(
        ops.AddIndex("caseevent", models.Index(fields=["action"], name="ev_action_idx"))
    ) == {("add-index", "cases_caseevent")}
    assert _lint(
        ops.AddField("case", "channel", models.CharField(max_length=20, db_index=True))
    ) == {("add-index", "cases_case")}
    assert _lint(
        ops.AlterField("case", "note", models.IntegerField(default=0)),
    ) == {("rewrite", "cases_case")}
    assert _lint(ops.AlterField("case", "closed_at", models.DateTimeField())) == {
        ("rewrite", "cases_case")
    }
    assert _lint(
        ops.AddConstraint(
            "case", models.CheckConstraint(condition=models.Q(version__gte=1), name="v_pos")
        )
    ) == {("add-constraint", "cases_case")}
    assert _lint(ops.RenameField("case", "note", "remark")) == {("rename-field", "cases_case")}
    assert _lint(ops.RemoveField("case", "note")) == {("remove-field", "cases_case")}
    assert _lint(ops.RunSQL("CREATE INDEX ev_x ON cases_caseevent (action)", "")) == {
        ("add-index", "cases_caseevent")
    }
    assert _lint(
        ops.AddField("case", "flag", models.BooleanField(default=False)),
        ops.RunPython(lambda apps, schema_editor: None, ops.RunPython.noop),
    ) == {("backfill-under-lock", "cases_case")}
    # cheap or safe: none of these is flagged
    assert not _lint(
        ops.AddField("case", "flag", models.BooleanField(default=False)),
        ops.AddField("case", "remark", models.TextField(blank=True, null=True)),
        ops.AlterField("case", "waiting_reason", models.CharField(blank=True, max_length=400)),
        ops.RunSQL("CREATE INDEX CONCURRENTLY ev_y ON cases_caseevent (action)", ""),
        atomic=False,
    )
    assert not _lint(
        AddIndexConcurrently("caseevent", models.Index(fields=["action"], name="ev_a2")),
        atomic=False,
    )
    concurrent = import_module("cases.migrations.0025_case_one_open_per_order_kind")
    assert not _lint(
        concurrent.AddConstraintConcurrently(
            "case",
            models.UniqueConstraint(
                fields=["order_id"], condition=models.Q(status="ready"), name="c_one"
            ),
        ),
        atomic=False,
    )
    assert not _lint(
        ops.CreateModel("Note", [("id", models.BigAutoField(primary_key=True))]),
        ops.AddIndex("note", models.Index(fields=["id"], name="note_id_idx")),
    )
    assert not _lint(ops.AddIndex("team", models.Index(fields=["name"], name="team_name_idx"))), (
        "a small table is not flagged"
    )

    # A foreign key's own index (cases 0016 drops the account's): turning it on builds it.
    def account(*, db_index: bool) -> models.ForeignKey:
        return models.ForeignKey(
            "cases.customeraccount", models.PROTECT, related_name="cases", db_index=db_index
        )

    assert _lint(ops.AlterField("case", "account", account(db_index=True))) == {
        ("add-index", "cases_case")
    }
    assert not _lint(ops.AlterField("case", "account", account(db_index=False)), atomic=False)


@pytest.mark.postgres_only
def test_plain_create_index_blocks_inserts_and_concurrently_does_not():
    """The measurement behind the rule (tests/support/lock_measure.py runs it on 1M rows)."""
    from tests.support.lock_measure import measure

    # The build must last long enough to show the difference: on a fast, idle machine 200k rows
    # index in well under 0.15 s, so the table doubles until it does.
    for rows in (200_000, 400_000, 800_000):
        result = measure(rows, server=_server_url("postgres"), extras=False)
        plain, concurrent = result["create_index"], result["create_index_concurrently"]
        if plain["ddl"] > 0.15:
            break
    assert plain["ddl"] > 0.15, result  # long enough to show the difference
    assert plain["insert"] > 0.6 * (plain["ddl"] - 0.05), result  # waited for the build
    assert concurrent["insert"] < 0.25 * concurrent["ddl"], result  # did not wait


# Events in the log when 0010 runs: enough for its backfill to last over a second here.
EVENTS = 4_000


@pytest.mark.postgres_only
def test_the_audit_chain_backfill_never_holds_writers_off_the_events(tmp_path):
    """``cases`` 0010 links every event that exists into its case's chain. It ran as one
    transaction holding ACCESS EXCLUSIVE on ``cases_caseevent`` from its first ALTER to the last
    link, so every writer of events (every case step) waited for the whole backfill. Measured
    from outside on the migration running in its own process: a writer's lock is refused at
    most for a statement's moment, and ``audit_verify`` passes on the chains it wrote."""
    import psycopg

    from tests.support.lock_measure import writers_blocked

    name = f"holdfast_chain_{os.getpid()}"
    admin = _server_url("postgres").replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _server_url(name)
    env = _child_env(url, tmp_path)

    def step(*args: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "tests.support.chain_backfill", *args]
        return subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)

    def finished(proc: subprocess.Popen) -> None:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-4000:]

    try:
        finished(step("seed", str(EVENTS)))
        backfill = step("migrate")
        blocked = writers_blocked(
            url.replace("postgres://", "postgresql://", 1),
            "cases_caseevent",
            lambda: backfill.poll() is None,
        )
        finished(backfill)
        print(f"backfill of {EVENTS} events: {blocked}")
        assert blocked["watched"] > 1.0, blocked  # long enough to show the difference
        assert blocked["longest_refused"] < 0.5, blocked
        finished(step("finish"))  # every later migration, then audit_verify exits 0
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres_only
def test_the_one_open_case_and_live_operation_constraints_are_built_concurrently(db):
    """cases 0025 and approvals 0009 build their partial unique indexes without blocking
    writes: the SQL they send is CREATE UNIQUE INDEX CONCURRENTLY (what the lock rule lets
    ``AddConstraintConcurrently`` through for)."""
    from django.core.management import call_command

    for app, name in (
        ("cases", "0025_case_one_open_per_order_kind"),
        ("approvals", "0009_operation_one_live_per_change"),
    ):
        out = io.StringIO()
        call_command("sqlmigrate", app, name, stdout=out)
        sql = out.getvalue()
        assert "CREATE UNIQUE INDEX CONCURRENTLY" in sql, sql
        assert 'CREATE UNIQUE INDEX "' not in sql, sql


@pytest.mark.postgres_only
def test_the_case_table_has_no_pattern_index_that_no_query_uses(db):
    """Every update that moves a case writes an entry into each of its indexes. Django gives an
    indexed text field a ``varchar_pattern_ops`` twin that only ``LIKE 'prefix%'`` can use:
    the reference's serves the case numbering (``reference__startswith``); the status's and
    the wait's served nothing and are gone (cases 0038), while their plain b-trees stay."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'cases_case'")
        indexes = dict(cursor.fetchall())
    patterns = {name for name, sql in indexes.items() if "varchar_pattern_ops" in sql}
    assert patterns == {"cases_case_reference_cb43aa34_like"}
    assert indexes["cases_case_status_95787cb3"].endswith("USING btree (status)")
    assert indexes["cases_case_waiting_on_9b7ec905"].endswith("USING btree (waiting_on)")
