"""The reference order system as a separate process, steered over HTTP: the simulation's
(``manage.py simulate``) and the tests' (``tests/support/order_system.py`` adds the pytest
fixtures on top of this class).

Holdfast's settings do not include the ``orders`` app, so this module imports only the standard
library, httpx and psycopg -- never Django or ``orders``.

Database: if ``TEST_DATABASE_URL`` or ``DATABASE_URL`` is a PostgreSQL URL, a fresh database
``holdfast_orders_test_<pid>_<n>`` is created on that server and dropped on ``stop()``;
otherwise a temporary SQLite file. Fault injection and the ``/_testing/`` endpoints are on.

Change kinds: by default the process accepts the three built-in kinds; ``change_kinds=[...]``
enables only those (``ORDERS_CHANGE_KINDS``), ``extra_kinds=[...]`` loads plug-in handler modules
(``ORDERS_EXTRA_KINDS``; ``tests.support.order_system.GIFT_MESSAGE_KIND`` is a test-only
fourth kind). ``seed`` creates
orders with a ``status`` and ``shipping_address`` (``SEED_ADDRESS`` unless given, ``None`` for
none); ``set_order`` changes an order's status or address as the world outside would.

Credential: the process checks ``ORDERS_API_TOKEN`` = ``DEFAULT_API_TOKEN``, which is what
Holdfast's test settings send (``ORDER_SYSTEM_TOKEN`` from the environment, else its development
default); ``client`` and every helper here send it, raw calls add ``auth_headers``.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

__all__ = [
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TIMESTAMP_HEADER",
    "webhook_headers",
    "DEFAULT_API_TOKEN",
    "DEFAULT_GRANT_KEY",
    "DEFAULT_WEBHOOK_SECRET",
    "SEED_ADDRESS",
    "OrderSystemProcess",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GRANT_KEY = "test-approval-grant-key"
DEFAULT_WEBHOOK_SECRET = "test-webhook-secret"  # noqa: S105 - a test-only value
# The same value Holdfast's settings give ORDER_SYSTEM_TOKEN under test (config/settings.py).
DEFAULT_API_TOKEN = os.environ.get("ORDER_SYSTEM_TOKEN") or "dev-order-system-token"
# The address the order system gives a seeded order that names none (``orders.services``'
# ``SEED_ADDRESS``; tests/orders checks the two are the same).
SEED_ADDRESS = {
    "name": "Goods In",
    "line1": "1 Dock Road",
    "line2": "",
    "city": "Bristol",
    "postal_code": "BS1 6XX",
    "country": "GB",
}
_KEEP: Any = object()
WEBHOOK_SIGNATURE_HEADER = "X-Orders-Signature"
WEBHOOK_TIMESTAMP_HEADER = "X-Orders-Timestamp"


def webhook_headers(
    body: bytes, *, secret: str = DEFAULT_WEBHOOK_SECRET, at: int | None = None
) -> dict[str, str]:
    """The headers the order system signs a webhook delivery with (``orders/outbox.py``):
    ``X-Orders-Timestamp: <at>`` and ``X-Orders-Signature: t=<at>,sha256=<hex HMAC-SHA256(secret,
    "<at>." + body)>``, signed at ``at`` (unix seconds; default now)."""
    timestamp = int(time.time()) if at is None else at
    signed = f"{timestamp}.".encode("ascii") + body
    digest = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()
    return {
        WEBHOOK_TIMESTAMP_HEADER: str(timestamp),
        WEBHOOK_SIGNATURE_HEADER: f"t={timestamp},sha256={digest}",
    }


_READY = re.compile(r"Order system: (http://[^\s/]+)/")
_counter = itertools.count(1)


def _postgres_url() -> str | None:
    for name in ("TEST_DATABASE_URL", "DATABASE_URL"):
        url = os.environ.get(name, "")
        if url.startswith("postgres"):
            return url
    return None


class OrderSystemProcess:
    """One ``python -m orders serve`` process with its own database, steered over HTTP."""

    def __init__(
        self,
        *,
        grant_key: str = DEFAULT_GRANT_KEY,
        webhook_secret: str = DEFAULT_WEBHOOK_SECRET,
        webhook_url: str = "",
        api_token: str = DEFAULT_API_TOKEN,
        extra_env: dict[str, str] | None = None,
        change_kinds: list[str] | None = None,
        extra_kinds: list[str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.api_token = api_token
        self.grant_key = grant_key
        self.webhook_secret = webhook_secret
        self.webhook_url = webhook_url
        kinds_env = {}
        if change_kinds is not None:
            kinds_env["ORDERS_CHANGE_KINDS"] = ",".join(change_kinds)
        if extra_kinds is not None:
            kinds_env["ORDERS_EXTRA_KINDS"] = ",".join(extra_kinds)
        self.extra_env = {**kinds_env, **(extra_env or {})}
        self.startup_timeout = startup_timeout
        self.base_url = ""
        self.database_url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self._pg_admin_url: str | None = None
        self._pg_name: str | None = None
        self._client: httpx.Client | None = None

    # --- lifecycle --------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> OrderSystemProcess:
        self._tempdir = tempfile.TemporaryDirectory(prefix="holdfast-orders-")
        workdir = Path(self._tempdir.name)
        self.database_url = self._create_database(workdir)
        log_path = workdir / "server.log"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "orders.settings",
            "ORDERS_DATABASE_URL": self.database_url,
            "ORDERS_FAULTS_ENABLED": "1",
            "APPROVAL_GRANT_KEY": self.grant_key,
            "ORDER_WEBHOOK_SECRET": self.webhook_secret,
            "ORDERS_API_TOKEN": self.api_token,
            "ORDERS_WEBHOOK_URL": self.webhook_url,
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }
        with log_path.open("wb") as log:
            self._process = process = subprocess.Popen(  # noqa: S603 - our own interpreter
                [sys.executable, "-m", "orders", "serve", "--host", "127.0.0.1", "--port", "0"],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.base_url = self._wait_ready(log_path, process)
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(10.0, connect=2.0),
            headers=self.auth_headers,
        )
        return self

    def _wait_ready(self, log_path: Path, process: subprocess.Popen[bytes]) -> str:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            output = log_path.read_text(errors="replace")
            if match := _READY.search(output):
                base_url = match.group(1)
                try:
                    if httpx.get(f"{base_url}/healthz", timeout=2.0).status_code == 200:
                        return base_url
                except httpx.HTTPError:
                    pass
            if process.poll() is not None:
                self.stop()
                raise RuntimeError(f"The order system exited while starting:\n{output}")
            time.sleep(0.05)
        output = log_path.read_text(errors="replace")
        self.stop()
        raise RuntimeError(f"The order system did not become healthy in time:\n{output}")

    def stop(self) -> None:
        """SIGTERM, wait, kill as a fallback; then drop the database it used."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        self._drop_database()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> OrderSystemProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- database ---------------------------------------------------------------------

    def _create_database(self, workdir: Path) -> str:
        """A fresh database for this process: PostgreSQL when configured, else a SQLite file
        in ``workdir``."""
        url = _postgres_url()
        if url is None:
            return f"sqlite:///{workdir / 'orders.sqlite3'}"
        import psycopg

        parts = urlsplit(url)
        self._pg_name = f"holdfast_orders_test_{os.getpid()}_{next(_counter)}"
        self._pg_admin_url = urlunsplit(parts._replace(path="/postgres", query=""))
        with psycopg.connect(self._pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self._pg_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self._pg_name}"')
        return urlunsplit(parts._replace(path=f"/{self._pg_name}"))

    def _drop_database(self) -> None:
        if self._pg_name is None or self._pg_admin_url is None:
            return
        import psycopg

        with psycopg.connect(self._pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self._pg_name}" WITH (FORCE)')
        self._pg_name = None

    # --- HTTP helpers -----------------------------------------------------------------

    @property
    def auth_headers(self) -> dict[str, str]:
        """The credential the order system requires on every call but ``/healthz``."""
        return {"Authorization": f"Bearer {self.api_token}"}

    @property
    def client(self) -> httpx.Client:
        """An httpx client bound to the order system (10 s read timeout, 2 s connect), sending
        the credential."""
        if self._client is None:
            raise RuntimeError("The order system is not running.")
        return self._client

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        """Delete every order, account, slot, operation, outbox event and fault rule. A request
        an injected latency still holds (a killed worker's write of the test before) is answered
        503 when it wakes and never runs on what is seeded after."""
        self._call("POST", "/_testing/reset")

    def seed(
        self,
        *,
        accounts: list[dict] | None = None,
        orders: list[dict] | None = None,
        slots: list[dict] | None = None,
    ) -> dict:
        """Upsert rows: accounts ``{account_id, name, access_active}``, orders
        ``{order_id, account_id, delivery_date, version?, status?, shipping_address?}`` (a new
        order is ``open`` with ``SEED_ADDRESS`` unless it names its own or ``None``), slots
        ``{date, capacity, taken?}``. Nothing seeded bumps a version or writes an event."""
        body = {"accounts": accounts or [], "orders": orders or [], "slots": slots or []}
        return self._call("POST", "/_testing/seed", json=body)

    def set_order(
        self,
        order_id: str,
        *,
        status: str | None = None,
        shipping_address: dict | None = _KEEP,
        bump_version: bool = True,
    ) -> dict:
        """Change an order as the world outside Holdfast would (e.g. ``status="shipped"``, or
        another address; ``shipping_address=None`` removes it). By default its version moves
        on and an ``order.updated`` event goes out; ``bump_version=False`` changes only the
        fields (the receiver then refuses at an unchanged version). Returns the order."""
        body: dict[str, Any] = {"bump_version": bump_version}
        if status is not None:
            body["status"] = status
        if shipping_address is not _KEEP:
            body["shipping_address"] = shipping_address
        return self._call("POST", f"/_testing/orders/{order_id}", json=body)

    def order(self, order_id: str) -> dict:
        """``GET /orders/{order_id}``: what Holdfast reads."""
        return self._call("GET", f"/orders/{order_id}")

    def capabilities(self) -> dict:
        return self._call("GET", "/capabilities")

    def set_fault(self, kind: str, **options: Any) -> dict:
        """Add a fault rule: ``drop_after_commit``, ``delay_after_commit`` (``seconds``),
        ``fail_before_commit`` (``retry_after``?), ``unavailable``, ``latency`` (``seconds``),
        each with ``path_prefix`` (default ``/``) and ``times`` (default 1; ``None``: until
        cleared); or ``search_lag`` with ``seconds``."""
        if kind == "search_lag":
            return self._call("POST", "/_faults/search-lag", json=options)
        return self._call("POST", "/_faults/", json={"kind": kind, **options})

    def faults(self) -> list[dict]:
        return self._call("GET", "/_faults/")["faults"]

    def clear_faults(self) -> None:
        self._call("DELETE", "/_faults/")

    def state(self, order_id: str) -> dict:
        """``{order, fence_token, access_active, operations, events, slots}`` for one order."""
        return self._call("GET", f"/_testing/orders/{order_id}/state")

    def outbox(self) -> list[dict]:
        return self._call("GET", "/_testing/outbox")["events"]

    def resend_event(self, event_id: str) -> dict:
        """Resend one outbox event by hand, as ``orders_resend_event`` does (same id and body,
        signed anew): ``{event_id, accepted, error}``."""
        return self._call("POST", f"/_testing/outbox/{event_id}/resend")

    def set_access(self, account_id: str, active: bool) -> dict:
        path = f"/_testing/accounts/{account_id}/access"
        return self._call("POST", path, json={"active": active})
