"""``make run``: the development stack. Migrate, load the demo (a case per kind), start the web
app, the worker cluster and the reference order system with fault injection on, print where
they are, and stop them all cleanly on Ctrl-C.

It refuses ``DJANGO_ENV=production``: the demo prints a shared password and an API token, and
fault injection exposes endpoints that delete every row. Both sides share one credential:
``ORDER_SYSTEM_TOKEN`` (or ``ORDERS_API_TOKEN``) if set, else the development default.

Ports: ``HOLDFAST_PORT`` (8000) and ``ORDER_SYSTEM_PORT`` (8100).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
# A restarted process that keeps exiting is a fault to show, not to hide: at most this many
# restarts within the window, then the stack stops.
RESTART_LIMIT = 5
RESTART_WINDOW = 300.0
PY = sys.executable


def _run(*args: str, env: dict[str, str]) -> None:
    subprocess.run([PY, *args], cwd=ROOT, env=env, check=True)


def _spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """This interpreter with ``args``, started in its own session: Ctrl-C reaches only the
    supervisor, which stops each child once with SIGTERM (django-q2 mishandles a second signal
    during shutdown)."""
    return subprocess.Popen([PY, *args], cwd=ROOT, env=env, start_new_session=True)


def _wait_for(url: str, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def _taken(host: str, port: int) -> bool:
    """Something already listens on ``host:port`` (a bind is refused as in use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def _ports_refused(host: str, ports: dict[str, tuple[str, int]]) -> str | None:
    """Why the stack cannot start on these ports, or None. Checked before anything is touched:
    a second ``make run`` beside a running one found the first one's services answering, printed
    their URLs as its own, emptied their metrics, and stopped when its order system could not
    bind."""
    taken = [(name, var, port) for name, (var, port) in ports.items() if _taken(host, port)]
    if not taken:
        return None
    said = "; ".join(f"the {name}'s port {port} ({var})" for name, var, port in taken)
    return (
        f"make run cannot start: something already listens on {host} at {said}. Is another "
        "`make run` still running? Stop it with Ctrl-C in its terminal, or start this one on "
        "other ports, e.g. HOLDFAST_PORT=8001 ORDER_SYSTEM_PORT=8101 make run. Nothing was "
        "changed."
    )


def main() -> int:
    if os.environ.get("DJANGO_ENV") == "production":
        print(
            "make run is the development stack (demo logins, fault injection): it refuses "
            "DJANGO_ENV=production. Run the web app, run_cluster and the order system separately.",
            file=sys.stderr,
        )
        return 2
    host = "127.0.0.1"
    web_port = int(os.environ.get("HOLDFAST_PORT", "8000"))
    orders_port = int(os.environ.get("ORDER_SYSTEM_PORT", "8100"))
    refused = _ports_refused(
        host,
        {
            "web app": ("HOLDFAST_PORT", web_port),
            "order system": ("ORDER_SYSTEM_PORT", orders_port),
        },
    )
    if refused:
        print(refused, file=sys.stderr)
        return 2
    holdfast_url = f"http://{host}:{web_port}/"
    orders_url = f"http://{host}:{orders_port}/"
    env = {
        **os.environ,
        "ORDER_SYSTEM_URL": orders_url.rstrip("/"),
        "ORDERS_WEBHOOK_URL": f"{holdfast_url}api/hooks/orders/",
        # The links in staff notification mails lead here (HOLDFAST_BASE_URL if set).
        "HOLDFAST_BASE_URL": os.environ.get("HOLDFAST_BASE_URL", holdfast_url.rstrip("/")),
        "PYTHONUNBUFFERED": "1",
    }
    env.setdefault("ORDERS_FAULTS_ENABLED", "1")  # the demo and drills inject faults
    # One credential for both sides: Holdfast sends ORDER_SYSTEM_TOKEN, the order system
    # checks ORDERS_API_TOKEN. Unset, both settings fall back to the same development default.
    token = env.get("ORDER_SYSTEM_TOKEN") or env.get("ORDERS_API_TOKEN")
    if token:
        env["ORDER_SYSTEM_TOKEN"] = env["ORDERS_API_TOKEN"] = token
    # The web app's /metrics sums what every process of the stack counted (the cluster's
    # workers too): one directory for all of them, emptied before any starts.
    metrics_dir = Path(env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(ROOT / "var" / "metrics")))
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)

    print("Preparing databases and the demo (D-41, D-42, D-43: one case per kind)…", flush=True)
    _run("manage.py", "migrate", "--no-input", "-v", "0", env=env)
    _run("-m", "orders", "migrate", "--no-input", "-v", "0", env=env)
    _run("-m", "orders", "seed_demo", env=env)
    _run("manage.py", "load_demo", env=env)
    _run("manage.py", "recover_after_restore", "--if-restored", env=env)

    # Each child in its own session (``_spawn``).
    children = {
        "order system": _spawn(
            "-m",
            "orders",
            "serve",
            "--host",
            host,
            "--port",
            str(orders_port),
            "--no-migrate",
            env=env,
        ),
        "web app": _spawn("manage.py", "runserver", f"{host}:{web_port}", "--noreload", env=env),
        "worker cluster": _spawn("manage.py", "run_cluster", env=env),
    }
    # Restarted when it exits non-zero: ``run_cluster`` ends a wedged cluster with exit 3
    # (``reconciliation.liveness``) and counts on its process manager, here this loop.
    restartable = {"worker cluster": ("manage.py", "run_cluster")}
    restarts: dict[str, list[float]] = {name: [] for name in restartable}

    def stop(*_args) -> None:
        for name, proc in children.items():
            if proc.poll() is None:
                print(f"Stopping the {name}…", flush=True)
                proc.send_signal(signal.SIGTERM)  # the main PID only: see STACK-NOTES
        for proc in children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            # Whatever is left of the child's session (a cluster's workers, a sweeper still
            # in its pass) goes with it: every piece of work is safe to kill and is re-driven
            # from the database on the next start.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    ok = _wait_for(f"{orders_url}healthz") and _wait_for(f"{holdfast_url}admin/login/")
    if ok:
        # Verify the order system's safeguards before any worker is allowed to apply.
        subprocess.run(
            [PY, "manage.py", "probe_order_system", "--order", "ORD-PROBE"],
            cwd=ROOT,
            env=env,
            check=False,
        )
    print("", flush=True)
    print(f"Holdfast: {holdfast_url}")
    print(f"Order system: {orders_url}")
    print(f"API docs: {holdfast_url}api/docs/")
    print("Logins above (password holdfast-demo). Ctrl-C stops everything.", flush=True)
    if not ok:
        print("Warning: a service did not answer in time; see its output above.", flush=True)
    while True:
        for name, proc in list(children.items()):
            if proc.poll() is None:
                continue
            if name in restartable and proc.returncode != 0:
                recent = [t for t in restarts[name] if time.monotonic() - t < RESTART_WINDOW]
                if len(recent) < RESTART_LIMIT:
                    restarts[name] = [*recent, time.monotonic()]
                    print(
                        f"The {name} exited with code {proc.returncode}; restarting it.",
                        flush=True,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)  # nothing of it may linger
                    children[name] = _spawn(*restartable[name], env=env)
                    continue
            print(f"The {name} exited with code {proc.returncode}; stopping.", flush=True)
            stop()
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
