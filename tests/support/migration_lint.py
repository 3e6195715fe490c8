"""Flag migration operations that would lock a large PostgreSQL table for long.

A migration runs while the application serves requests. On a table that holds every case,
event, proposal or webhook, an operation that scans, rewrites or indexes the table under a lock
that blocks writes stops the desk for the whole scan. Measured on this machine
(``tests/support/lock_measure.py``, 1M rows): a plain ``CREATE INDEX`` blocks a concurrent
INSERT for the whole build, ``CREATE INDEX CONCURRENTLY`` does not; ``ADD COLUMN ... NOT NULL
DEFAULT <constant>`` is instant on PostgreSQL 11+ (no rewrite), a volatile default rewrites.

Rules (only for a big table that existed before the migration; a table created in the same
migration is empty):

- ``add-index``: ``AddIndex`` (use ``AddIndexConcurrently`` in a non-atomic migration), or an
  ``AddField``/``AlterField`` that adds ``db_index``, ``unique`` or a foreign key's index;
- ``add-foreign-key``: a foreign key added to a big table (validated under SHARE ROW
  EXCLUSIVE; add it ``NOT VALID`` and ``VALIDATE`` separately);
- ``add-constraint``: ``AddConstraint`` (a unique constraint builds its index under SHARE; a
  check constraint scans under ACCESS EXCLUSIVE; use ``NOT VALID`` + ``VALIDATE``, or a unique
  index built concurrently);
- ``rewrite``: ``AddField`` with a non-constant ``db_default`` (a table rewrite), an
  ``AlterField`` that changes the column type (except widening a varchar), or makes a column
  NOT NULL (a full scan under ACCESS EXCLUSIVE);
- ``rename-field``, ``remove-field``, ``rename-model``, ``delete-model``: fast for PostgreSQL,
  but the running code still reads the old column or table: split over two deploys;
- ``run-sql``: ``RunSQL`` creating an index without ``CONCURRENTLY``, adding a constraint
  without ``NOT VALID``, changing a column type or setting NOT NULL on a big table;
- ``backfill-under-lock``: an atomic migration that changes a big table's schema and also runs
  ``RunPython``/``RunSQL``: the schema change's ACCESS EXCLUSIVE lock is held until the
  commit, through the whole backfill. Split the schema change and the backfill.

``tests/support/migration_allowlist.txt`` names the findings that predate the rule, each with
its reason; ``tests/test_migrations.py`` fails on any other finding. Run
``python -m tests.support.migration_lint`` to print every finding.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

PROJECT_APPS = ("cases", "approvals", "reconciliation", "lab")
ALLOWLIST = Path(__file__).with_name("migration_allowlist.txt")

# Tables that grow with the work: one or more rows per case, event or webhook.
BIG_TABLES = {
    "cases_case",
    "cases_caseevent",
    "cases_attempt",
    "cases_evidencereference",
    "cases_cancellationrequest",
    "reconciliation_inboundevent",
}
BIG_PREFIXES = ("approvals_",)


def is_big(table: str) -> bool:
    return table in BIG_TABLES or table.startswith(BIG_PREFIXES)


@dataclass(frozen=True, order=True)
class Finding:
    migration: str  # "cases.0010_caseevent_hash_chain"
    rule: str
    table: str
    detail: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.migration, self.rule, self.table)

    def describe(self) -> str:
        return f"{self.migration} {self.rule} {self.table}: {self.detail}"


# --- SQL text -----------------------------------------------------------------------------------

_INDEX = re.compile(
    r"CREATE\s+(UNIQUE\s+)?INDEX\s+(?P<conc>CONCURRENTLY\s+)?(IF\s+NOT\s+EXISTS\s+)?"
    r"\S+\s+ON\s+(ONLY\s+)?\"?(?P<table>[\w.]+)\"?",
    re.IGNORECASE,
)
_ALTER = re.compile(
    r"ALTER\s+TABLE\s+(ONLY\s+)?(IF\s+EXISTS\s+)?\"?(?P<table>[\w.]+)\"?(?P<rest>[^;]*)", re.I
)


def lint_sql(sql: str, created: AbstractSet[str] = frozenset()) -> list[tuple[str, str, str]]:
    """(rule, table, detail) for each statement of ``sql`` that locks a big table for long."""
    found = []
    for m in _INDEX.finditer(sql):
        table = m["table"].split(".")[-1]
        if not m["conc"] and is_big(table) and table not in created:
            found.append(("add-index", table, "CREATE INDEX without CONCURRENTLY"))
    for m in _ALTER.finditer(sql):
        table, rest = m["table"].split(".")[-1], m["rest"].upper()
        if not is_big(table) or table in created:
            continue
        if "ADD CONSTRAINT" in rest and "NOT VALID" not in rest:
            rule = "add-foreign-key" if "FOREIGN KEY" in rest else "add-constraint"
            found.append((rule, table, "ADD CONSTRAINT without NOT VALID"))
        if re.search(r"ALTER\s+COLUMN\s+\S+\s+(SET\s+DATA\s+)?TYPE", rest):
            found.append(("rewrite", table, "ALTER COLUMN ... TYPE"))
        if "SET NOT NULL" in rest:
            found.append(("rewrite", table, "SET NOT NULL scans the table"))
    return found


# --- operations ---------------------------------------------------------------------------------


def _pg_connection():
    """An unconnected PostgreSQL backend: enough for ``db_type`` without a server."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    return DatabaseWrapper(
        {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "lint",
            "USER": "",
            "PASSWORD": "",
            "HOST": "",
            "PORT": "",
            "OPTIONS": {},
            "TIME_ZONE": None,
            "CONN_MAX_AGE": 0,
            "CONN_HEALTH_CHECKS": False,
            "AUTOCOMMIT": True,
            "ATOMIC_REQUESTS": False,
            "TEST": {},
        },
        alias="migration-lint",
    )


def _db_type(field, pg) -> str | None:
    if field.is_relation and field.many_to_one:
        # A migration's foreign key is not bound to a model (its type is its target's key):
        # the same target is the same type.
        target = field.remote_field.model
        return f"fk {target if isinstance(target, str) else target._meta.label}".lower()
    return field.db_parameters(connection=pg)["type"]


def _widening(old: str | None, new: str | None) -> bool:
    """varchar(n) -> varchar(m >= n) or text: no rewrite in PostgreSQL."""
    o = re.fullmatch(r"varchar\((\d+)\)", old or "")
    if not o:
        return False
    if new == "text":
        return True
    n = re.fullmatch(r"varchar\((\d+)\)", new or "")
    return n is not None and int(n[1]) >= int(o[1])


def _indexed(field) -> bool:
    return bool(field.db_index or field.unique)  # a foreign key's db_index is True by default


def lint_migration(migration, state, pg) -> list[Finding]:
    """Findings of one migration, given the project state before it."""
    from django.db import migrations
    from django.db.models import Expression, ForeignKey, Value

    # ``getattr(field, "db_constraint", True)`` below: django-stubs do not declare the attribute.

    name = f"{migration.app_label}.{migration.name}"
    app = migration.app_label
    found: list[Finding] = []
    created: set[str] = set()
    schema_on_big: set[str] = set()
    data_ops = []

    def table_of(model_name: str) -> str | None:
        model_state = state.models.get((app, model_name.lower()))
        if model_state is None:
            return None
        return model_state.options.get("db_table") or f"{app}_{model_name.lower()}"

    def add(rule: str, table: str, detail: str) -> None:
        found.append(Finding(name, rule, table, detail))

    for op in migration.operations:
        table = table_of(op.model_name) if hasattr(op, "model_name") else None
        if isinstance(op, migrations.CreateModel):
            created.add(op.options.get("db_table") or f"{app}_{op.name.lower()}")
        elif isinstance(op, migrations.RunPython):
            data_ops.append(f"RunPython({getattr(op.code, '__name__', op.code)})")
        elif isinstance(op, migrations.RunSQL):
            data_ops.append("RunSQL")
            sqls = op.sql if isinstance(op.sql, (list, tuple)) else [op.sql]
            for sql in sqls:
                text = sql[0] if isinstance(sql, (list, tuple)) else sql
                for rule, tbl, detail in lint_sql(str(text), created):
                    add(rule, tbl, f"RunSQL: {detail}")
        if isinstance(op, (migrations.CreateModel, migrations.AddField)):
            # A new foreign key takes SHARE ROW EXCLUSIVE on the table it references.
            fields = [f for _n, f in op.fields] if hasattr(op, "fields") else [op.field]
            for field in fields:
                if isinstance(field, ForeignKey) and getattr(field, "db_constraint", True):
                    to = field.remote_field.model
                    to_app, _, to_model = (to if isinstance(to, str) else to._meta.label).partition(
                        "."
                    )
                    model_state = state.models.get((to_app.lower(), to_model.lower()))
                    if model_state is not None:
                        ref = model_state.options.get("db_table") or (
                            f"{to_app.lower()}_{to_model.lower()}"
                        )
                        if is_big(ref) and ref not in created:
                            schema_on_big.add(ref)
        if table is not None and is_big(table) and table not in created:
            if not isinstance(op, (migrations.AlterModelOptions, migrations.AlterModelManagers)):
                schema_on_big.add(table)
            desc = op.describe()
            # The last: a partial unique constraint built as CREATE UNIQUE INDEX CONCURRENTLY
            # (cases 0019; ``tests/test_migrations.py`` reads the SQL it sends).
            concurrent = type(op).__name__ in (
                "AddIndexConcurrently",
                "AddConstraintNotValid",
                "AddConstraintConcurrently",
            )
            if concurrent:
                pass  # django.contrib.postgres: built without blocking writes
            elif isinstance(op, migrations.AddIndex):
                add("add-index", table, f"{desc}: CREATE INDEX blocks writes for the build")
            elif isinstance(op, migrations.AddConstraint):
                add("add-constraint", table, f"{desc}: validated under a write-blocking lock")
            elif isinstance(op, migrations.AddField):
                field = op.field
                if _indexed(field):
                    add("add-index", table, f"{desc}: its index is built without CONCURRENTLY")
                if isinstance(field, ForeignKey) and getattr(field, "db_constraint", True):
                    add("add-foreign-key", table, f"{desc}: the foreign key is validated")
                db_default = getattr(field, "db_default", None)
                if isinstance(db_default, Expression) and not isinstance(db_default, Value):
                    add("rewrite", table, f"{desc}: a non-constant db_default rewrites the table")
            elif isinstance(op, migrations.AlterField):
                old = state.models[(app, op.model_name.lower())].fields[op.name]
                new = op.field
                old_type, new_type = _db_type(old, pg), _db_type(new, pg)
                if old_type != new_type and not _widening(old_type, new_type):
                    add("rewrite", table, f"{desc}: type {old_type} -> {new_type}")
                if old.null and not new.null:
                    add("rewrite", table, f"{desc}: SET NOT NULL scans the table")
                if _indexed(new) and not _indexed(old) or (new.unique and not old.unique):
                    add("add-index", table, f"{desc}: builds an index without CONCURRENTLY")
            elif isinstance(op, migrations.RenameField):
                add("rename-field", table, f"{desc}: running code still uses the old name")
            elif isinstance(op, migrations.RemoveField):
                add("remove-field", table, f"{desc}: running code still selects the column")
            elif isinstance(op, migrations.RenameModel):
                add("rename-model", table, f"{desc}: running code still uses the old table")
            elif isinstance(op, migrations.DeleteModel):
                add("delete-model", table, f"{desc}: running code still uses the table")
        op.state_forwards(app, state)
    if migration.atomic and data_ops and schema_on_big:
        for table in sorted(schema_on_big):
            add(
                "backfill-under-lock",
                table,
                f"schema change and {', '.join(data_ops)} in one transaction: the lock is "
                "held through the data step",
            )
    return found


def lint_migrations(apps: tuple[str, ...] = PROJECT_APPS) -> list[Finding]:
    """Every finding of every migration of ``apps``, in the order ``migrate`` applies them."""
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.state import ProjectState

    loader = MigrationLoader(None, ignore_no_migrations=True)
    pg = _pg_connection()
    plan = loader.graph.leaf_nodes()
    ordered = []
    seen = set()
    for leaf in plan:
        for node in loader.graph.forwards_plan(leaf):
            if node not in seen:
                seen.add(node)
                ordered.append(node)
    state = ProjectState(real_apps=loader.unmigrated_apps)
    found = []
    for node in ordered:
        migration = loader.graph.nodes[node]
        if node[0] in apps:
            found += lint_migration(migration, state, pg)
        else:
            migration.mutate_state(state, preserve=False)
    return sorted(set(found))


def load_allowlist(path: Path = ALLOWLIST) -> dict[tuple[str, str, str], str]:
    """``migration rule table  reason`` per line; ``#`` starts a comment line."""
    allowed: dict[tuple[str, str, str], str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 3)
        if len(parts) < 4:
            raise ValueError(f"{path.name}:{number}: want 'migration rule table reason'")
        allowed[(parts[0], parts[1], parts[2])] = parts[3]
    return allowed


def main() -> int:
    import os

    import django

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    allowed = load_allowlist()
    new = 0
    for finding in lint_migrations():
        mark = "allowed" if finding.key in allowed else "NEW"
        new += mark == "NEW"
        print(f"{mark:8} {finding.describe()}")
    print(f"{new} new finding(s)")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
