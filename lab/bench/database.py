"""``python -m lab.bench.database URL``: create the benchmark's PostgreSQL
database when it does not exist yet (``make bench`` runs it before ``migrate``), and refuse a
database whose name does not start with ``bench`` (the benchmark writes real rows)."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql


def ensure(url: str) -> str:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if parts.scheme not in {"postgres", "postgresql"}:
        raise SystemExit(f"make bench measures PostgreSQL: {url!r} is not a PostgreSQL URL.")
    if not name.startswith("bench"):
        raise SystemExit(
            f"make bench writes real rows: only into a database named bench*, not {name!r}."
        )
    server = urlunsplit(("postgresql", parts.netloc, "/postgres", parts.query, ""))
    with psycopg.connect(server, autocommit=True, connect_timeout=5) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return f"{name}: exists"
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{name}: created"


if __name__ == "__main__":
    print(ensure(sys.argv[1]))
