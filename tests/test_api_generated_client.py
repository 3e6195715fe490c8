"""A client generated from the running stack's schema works as generated.

``openapi-python-client`` (the test extra) generates a Python client from ``/api/schema/`` of
a Holdfast served over HTTP, next to a real order system process and a worker loop; a separate
process (``tests/support/generated_client_driver.py``) then drives intake → the approver's
queue → approve → the case done through the generated code alone, unpatched, with the
integration's token and an approver's token.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from django.utils.module_loading import import_string
from rest_framework.authtoken.models import Token

from cases import scheduling
from cases.models import Case
from tests.support.holdfast_server import serve_holdfast

pytestmark = [pytest.mark.order_system, pytest.mark.django_db(transaction=True)]

REPO_ROOT = Path(__file__).resolve().parents[1]
DRIVER = REPO_ROOT / "tests" / "support" / "generated_client_driver.py"
GENERATOR = Path(sys.executable).parent / "openapi-python-client"


def _generate(schema_url: str, into: Path) -> Path:
    """The generated package's parent directory (``holdfast_client`` inside it)."""
    package = into / "holdfast_client"
    env = {**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    generated = subprocess.run(
        [str(GENERATOR), "generate", "--url", schema_url, "--meta", "none"]
        + ["--output-path", str(package)],
        cwd=into,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    # The generator warns about what it could not turn into code: nothing may be left out.
    assert "Warning" not in generated.stdout + generated.stderr, generated.stdout
    return into


def _work_until(driver: subprocess.Popen, timeout: float, lock) -> None:
    """A worker's loop in this process (as ``run_worker`` does) while the driver runs: the sweep
    dispatches due cases, and what the services enqueue (also from the served requests) runs
    here at once."""
    from reconciliation.sweep import sweep_once

    queue: deque[tuple[str, tuple]] = deque()
    scheduling.run_in_process(queue)
    deadline = time.monotonic() + timeout
    try:
        while driver.poll() is None and time.monotonic() < deadline:
            with lock:
                sweep_once(run=lambda path, case_id: import_string(path)(case_id), dispatch_limit=1)
                while queue:
                    func_path, args = queue.popleft()
                    if not func_path.endswith(".sweeper"):
                        import_string(func_path)(*args)
            time.sleep(0.05)
    finally:
        scheduling.run_in_process(None)


def test_a_client_generated_from_the_running_schema_drives_intake_to_done_unpatched(
    autonomous, live_orders, account, lead, approver, make_user, tmp_path
):
    integration = make_user("integration", "agent", teams=[account.team], is_staff=False)
    intake_token = Token.objects.create(user=integration).key
    approver_token = Token.objects.create(user=approver).key
    date = timezone.localdate() + dt.timedelta(days=7)
    started = time.monotonic()

    # PostgreSQL serves requests while the worker works; SQLite's in-memory test database
    # locks whole tables across threads, so there the two take turns.
    lock = threading.Lock() if connection.vendor == "sqlite" else contextlib.nullcontext()
    with serve_holdfast(lock=lock) as holdfast_url:
        client_dir = _generate(f"{holdfast_url}/api/schema/", tmp_path)
        generated_at = time.monotonic()
        driver = subprocess.Popen(  # noqa: S603 - this interpreter, fixed arguments
            [sys.executable, str(DRIVER), str(client_dir), holdfast_url, intake_token]
            + [approver_token, account.reference, "ORD-7731", date.isoformat()],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _work_until(driver, timeout=60, lock=lock)
            out, err = driver.communicate(timeout=10)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()

    steps = {line["step"]: line for line in map(json.loads, out.splitlines())}
    assert driver.returncode == 0, (out, err)
    assert steps["intake"]["status"] == 201
    assert steps["queue"]["may_decide"] is True
    assert steps["approve"]["proposal_status"] == "approved"
    assert steps["done"]["case_status"] == "done"
    case = Case.objects.get(reference=steps["intake"]["reference"])
    assert case.status == "done"
    assert case.change["delivery_date"] == date.isoformat()
    assert live_orders.state("ORD-7731")["order"]["delivery_date"] == date.isoformat()
    assert steps["done"]["operations"] == [op.key for op in case.operations.all()]
    # Generation takes seconds, the whole round trip well under a minute.
    print(
        f"generated in {generated_at - started:.1f}s, "
        f"intake to done in {time.monotonic() - generated_at:.1f}s"
    )
