"""The peer anchor of ``make bench``: a DBOS Transact workflow sending the same write to the same
order system, queued at the cluster's concurrency (``WORKERS``), its system database a
``bench*`` database of its own. DBOS checkpoints each workflow and its step's output there:
what it records of a write, as Holdfast records an apply.

Run as its own process (``python -m lab.bench.dbos_anchor WRITES_JSON SYSTEM_DB_URL``, with
``DJANGO_SETTINGS_MODULE`` and ``ORDER_SYSTEM_URL`` set): it sends the writes through Holdfast's
order system client (the same request as an apply and as ``bare_writes``) and prints one JSON
line, ``{"count": N, "seconds": S}``. DBOS is a bench-only extra (``pip install .[bench]``):
without it the bench says "not measured" with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lab.bench.series import Skip

QUEUE = "bench_writes"
POLL_SECONDS = 0.01  # DBOS's queue poll (default 1 s): its fastest setting, not its slowest


def run_dbos(writes: list[dict[str, Any]], system_db_url: str, concurrency: int) -> float:
    """Enqueue every write as a workflow on a queue of ``concurrency`` and wait for all; the
    seconds from the first enqueue to the last result."""
    from dbos import DBOS

    from reconciliation.client import OrderSystemClient

    client = OrderSystemClient.from_settings()

    @DBOS.step()
    def send(write: dict[str, Any]) -> int:
        client.apply_operation(
            write["order_id"],
            operation_key=write["operation_key"],
            change=write["change"],
            expected_version=write["expected_version"],
            fencing_token=write["fencing_token"],
            approval_grant=write["approval_grant"],
        )
        return 1

    @DBOS.workflow()
    def apply_write(write: dict[str, Any]) -> int:
        return send(write)

    DBOS(config={"name": "holdfast-bench", "system_database_url": system_db_url})
    DBOS.launch()
    queue = DBOS.register_queue(
        QUEUE, worker_concurrency=concurrency, polling_interval_sec=POLL_SECONDS
    )
    try:
        start = time.perf_counter()
        handles = [queue.enqueue(apply_write, write) for write in writes]
        done = sum(handle.get_result() for handle in handles)
        elapsed = time.perf_counter() - start
    finally:
        DBOS.destroy()
    if done != len(writes):
        raise RuntimeError(f"{done} of {len(writes)} DBOS workflows wrote")
    return elapsed


def measure(
    writes: list[dict[str, Any]],
    system_db_url: str,
    concurrency: int,
    env: dict[str, str],
    work_dir: Path,
) -> float:
    """The writes/s of the DBOS workflows, run in their own process; ``Skip`` with the reason
    when DBOS is not installed or fails here."""
    import importlib.util

    if importlib.util.find_spec("dbos") is None:
        raise Skip("DBOS Transact not installed (pip install '.[bench]')")
    path = work_dir / "dbos-writes.json"
    path.write_text(json.dumps(writes))
    result = subprocess.run(  # noqa: S603 - this interpreter, this module
        [sys.executable, "-m", "lab.bench.dbos_anchor", str(path), system_db_url, str(concurrency)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    (work_dir / "dbos.log").write_text(result.stdout + result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise Skip(f"DBOS run failed: {(result.stderr or result.stdout).strip()[-300:]}")
    found = json.loads(lines[-1])
    return float(found["count"]) / float(found["seconds"])


def main(argv: list[str]) -> None:
    import django

    django.setup()
    writes = json.loads(Path(argv[0]).read_text())
    seconds = run_dbos(writes, argv[1], int(argv[2]))
    print(json.dumps({"count": len(writes), "seconds": seconds}), flush=True)  # noqa: T201


if __name__ == "__main__":
    main(sys.argv[1:])
