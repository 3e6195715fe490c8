"""PostgreSQL login roles in the test database, granted as the README's script grants them.

``readme_grants()`` reads the grant script from README.md ("Database roles and the audit log"),
so a test that connects as ``app_role`` checks what a deployment really runs, not a copy.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from django.db import connection

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_grants() -> str:
    """The SQL between ``<<'SQL'`` and ``SQL`` of the README's grant step."""
    text = README.read_text()
    match = re.search(r"psql \"postgres://holdfast_owner[^\n]*<<'SQL'\n(.*?)\nSQL\n", text, re.S)
    assert match, "the README's grant script is gone"
    return match.group(1)


def role_connection(role: str, **kwargs):
    import psycopg

    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        dbname=settings["NAME"],
        user=role,
        **kwargs,
    )


def refused(conn, statements: list[str]) -> str:
    """Run ``statements`` in one transaction on a psycopg connection; the refusal's message
    (InsufficientPrivilege), or fail when nothing refused them."""
    import psycopg

    try:
        with conn.transaction(), conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
    except psycopg.errors.InsufficientPrivilege as refusal:
        return str(refusal)
    raise AssertionError(f"{statements} was not refused")


@contextlib.contextmanager
def roles(*, writer_tables: tuple[str, ...]) -> Iterator[dict[str, str]]:
    """Two login roles, dropped afterwards: ``app``, granted by the README's script, and
    ``writer``, granted every privilege on ``writer_tables`` (a role someone granted too
    much). The caller's connection acts as the tables' owner."""
    suffix = os.getpid()
    names = {"app": f"holdfast_app_test_{suffix}", "writer": f"holdfast_writer_test_{suffix}"}
    try:
        with connection.cursor() as cursor:
            for role in names.values():
                _drop(cursor, role)
                cursor.execute(f'CREATE ROLE "{role}" LOGIN')
            app, writer = names["app"], names["writer"]
            cursor.execute(f'GRANT USAGE ON SCHEMA public TO "{app}"')
            cursor.execute(readme_grants().replace("holdfast_app", f'"{app}"'))
            cursor.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON {', '.join(writer_tables)} "
                f'TO "{writer}"'
            )
            cursor.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{writer}"')
        yield names
    finally:
        with connection.cursor() as cursor:
            for role in names.values():
                _drop(cursor, role)


def _drop(cursor, role: str) -> None:
    """Drop ``role`` and the privileges it holds here, if it exists (a failed run may have
    left it)."""
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    if cursor.fetchone() is not None:
        cursor.execute(f'DROP OWNED BY "{role}"')
        cursor.execute(f'DROP ROLE "{role}"')
