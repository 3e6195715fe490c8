"""Run every test suite on every database and print one summary.

``make test`` calls this. Suites: Holdfast (``config.settings``) and the reference order
system (``orders.settings``), each on SQLite and, when a server answers, on PostgreSQL
(``TEST_DATABASE_URL``, default ``postgres://postgres@127.0.0.1:5432/holdfast``); and the
browser suite (``tests/browser``) once, on PostgreSQL, or on SQLite when PostgreSQL does not
answer. The suites run in two lanes side by side (Holdfast on PostgreSQL alone in one, the rest
-- with the drills, a PostgreSQL suite of their own -- in the other; ``SUITES_SEQUENTIAL=1`` runs
them one by one), each printed whole when it ends. The suites beside Holdfast's PostgreSQL suite
have databases named after ``TEST_DATABASE_URL``'s (``<name>_browser``, ``<name>_drills``,
``<name>_orders``), so two checkouts run side by side on one server. With ``REQUIRE_POSTGRES=1``
an unreachable PostgreSQL fails the run instead of skipping it.
Extra arguments are passed to every pytest invocation (e.g. ``-k claim -x``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/holdfast"
# The browser suite (Chromium through Playwright) runs once, on PostgreSQL when it answers.
BROWSER = "tests/browser"
BROWSER_IGNORE = f"--ignore={BROWSER}"
# Only Holdfast's suite runs schemathesis (tests/test_api_schema_fuzz.py); the others skip
# loading its plugin (about 2 s each).
NO_SCHEMATHESIS = ["-p", "no:schemathesis"]
ORDERS = [*NO_SCHEMATHESIS, "--ds=orders.settings", "tests/orders"]
# The drills (PostgreSQL only: a real stack, every scenario against it) run as a suite of their
# own in the other lane, which balances the two: without them Holdfast's PostgreSQL suite was the
# longer lane by about their length (1,066 s against 850 s in a clean-clone run).
DRILLS = "tests/lab/test_drills.py"


def postgres_url() -> str:
    return os.environ.get("TEST_DATABASE_URL") or DEFAULT_PG


def postgres_answers(url: str) -> tuple[bool, str]:
    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(
        (
            parts.scheme.replace("postgres", "postgresql", 1)
            if parts.scheme == "postgres"
            else parts.scheme,
            parts.netloc,
            "/postgres",
            "",
            "",
        )
    )
    try:
        with psycopg.connect(admin, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True, ""
    except (psycopg.Error, OSError) as exc:  # any failure to connect means "not reachable"
        return False, str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


def side_database(url: str, suffix: str) -> str:
    """The URL of a database beside ``url``'s, named after it (``<name>_<suffix>``), so that two
    checkouts with their own ``TEST_DATABASE_URL`` run ``make test`` side by side on one server
    without sharing the browser's, the drills' or the order system's database."""
    name = urlsplit(url).path.lstrip("/") or "holdfast"
    return with_database(url, f"{name}_{suffix}")


def run_suite(title: str, args: list[str], env: dict[str, str], extra: list[str]) -> dict:
    """Run one pytest invocation with its output in a log file; print the log when it ends."""
    with tempfile.NamedTemporaryFile(suffix=".xml", delete=False) as tmp:
        junit = tmp.name
    log_path = ROOT / "var" / f"suite-{title.lower().replace(' ', '-')}.log"
    with _print_lock:
        print(f"started: {title} (output in {log_path.relative_to(ROOT)})", flush=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        code = subprocess.call(
            # The slowest tests end each suite's log: where to look when CI nears its budget.
            [
                sys.executable,
                "-m",
                "pytest",
                *args,
                f"--junitxml={junit}",
                "--durations=15",
                *extra,
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    with _print_lock:
        print(f"\n{'=' * 20} {title} {'=' * 20}", flush=True)
        sys.stdout.write(log_path.read_text(errors="replace"))
        sys.stdout.flush()
    counts = {
        "title": title,
        "code": code,
        "seconds": time.monotonic() - started,
        "passed": 0,
        "failed": 0,
        "skipped": 0,
    }
    try:
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        tests, failures, errors, skipped = (
            int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")
        )
        counts.update(
            passed=tests - failures - errors - skipped, failed=failures + errors, skipped=skipped
        )
    except (ET.ParseError, FileNotFoundError, AttributeError):
        counts["failed"] = max(counts["failed"], 1 if code not in (0, 5) else 0)
    finally:
        Path(junit).unlink(missing_ok=True)
    if code == 5:
        # No test collected: a broken suite, not a pass -- unless extra arguments (``-k``)
        # selected nothing in this one.
        counts["failed"] += 0 if extra else 1
    elif code != 0 and counts["failed"] == 0:
        counts["failed"] = 1
    return counts


_print_lock = threading.Lock()


def run_lanes(lanes: list[list[tuple]], extra: list[str]) -> list[dict]:
    """Run each lane's suites one after another, the lanes side by side (one per core): the
    longest suite, Holdfast on PostgreSQL, has a lane of its own. Every suite has its own
    databases, so lanes never share a test database."""
    results: dict[str, dict] = {}

    def run_lane(lane):
        for title, args, env in lane:
            results[title] = run_suite(title, args, env, extra)

    threads = [threading.Thread(target=run_lane, args=(lane,)) for lane in lanes if lane]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    order = [title for lane in lanes for title, _, _ in lane]
    return [results[title] for title in order]


def _own_database(env: dict[str, str], url: str) -> dict[str, str]:
    """``env`` with Holdfast on the database at ``url`` (its test database is named after it)."""
    return {**env, "DATABASE_URL": url, "TEST_DATABASE_URL": url}


# The order system a test reaches unless it starts its own: a port nothing listens on. The
# default (8100) is `make run`'s order system, and a suite run beside `make run` asked it (its
# fencing tokens, far above the test database's, read as a restore: two tests failed).
NO_ORDER_SYSTEM = "http://127.0.0.1:9"


def main(extra: list[str]) -> int:
    var = ROOT / "var"
    var.mkdir(exist_ok=True)
    sqlite_env = {
        "DATABASE_URL": f"sqlite:///{var / 'test-holdfast.sqlite3'}",
        "ORDERS_DATABASE_URL": f"sqlite:///{var / 'test-orders.sqlite3'}",
        "TEST_DATABASE_URL": "",
        "DJANGO_ENV": "test",
        "ORDER_SYSTEM_URL": NO_ORDER_SYSTEM,
    }
    plans = [
        ("Holdfast suite on SQLite", ["tests", BROWSER_IGNORE], sqlite_env),
        ("Order system suite on SQLite", ORDERS, sqlite_env),
    ]
    pg = postgres_url()
    reachable, why = postgres_answers(pg)
    require = os.environ.get("REQUIRE_POSTGRES", "") in {"1", "true", "yes"}
    if reachable:
        pg_env = {
            "DATABASE_URL": pg,
            "TEST_DATABASE_URL": pg,
            "ORDERS_DATABASE_URL": side_database(pg, "orders"),
            "DJANGO_ENV": "test",
            "ORDER_SYSTEM_URL": NO_ORDER_SYSTEM,
        }
        # Suites that run beside the Holdfast suite have databases of their own.
        browser_env = _own_database(pg_env, side_database(pg, "browser"))
        drills_env = _own_database(pg_env, side_database(pg, "drills"))
        lanes = [
            [
                (
                    "Holdfast suite on PostgreSQL",
                    ["tests", BROWSER_IGNORE, f"--ignore={DRILLS}"],
                    pg_env,
                )
            ],
            [
                *plans,
                ("Order system suite on PostgreSQL", ORDERS, pg_env),
                ("Holdfast drills on PostgreSQL", [*NO_SCHEMATHESIS, DRILLS], drills_env),
                ("Browser suite on PostgreSQL", [*NO_SCHEMATHESIS, BROWSER], browser_env),
            ],
        ]
    else:
        print(f"PostgreSQL at {pg} does not answer: {why}", flush=True)
        # The browser suite runs once; without PostgreSQL a newcomer still gets it.
        plans.append(("Browser suite on SQLite", [*NO_SCHEMATHESIS, BROWSER], sqlite_env))
        lanes = [plans]
    if os.environ.get("SUITES_SEQUENTIAL", "") in {"1", "true", "yes"}:
        lanes = [[plan for lane in lanes for plan in lane]]
    print(f"Running {sum(map(len, lanes))} suites in {len(lanes)} lane(s)", flush=True)
    results = run_lanes(lanes, extra)
    print(f"\n{'=' * 20} summary {'=' * 20}")
    for r in results:
        print(
            f"{r['title']:<36} {r['passed']:>4} passed {r['failed']:>3} failed "
            f"{r['skipped']:>3} skipped  {r['seconds']:6.1f}s"
        )
    missing_pg = not reachable
    if missing_pg:
        print("PostgreSQL suites: " + ("FAILED (REQUIRE_POSTGRES=1)" if require else "skipped"))
    passed = sum(r["passed"] for r in results)
    failed = sum(r["failed"] for r in results) + (1 if missing_pg and require else 0)
    skipped = sum(r["skipped"] for r in results)
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
