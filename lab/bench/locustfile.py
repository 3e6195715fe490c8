"""The load of issue 27's goal 7, for ``locust`` (headless, started by ``lab.bench.load``).

Twenty users in three roles, each a logged-in session of the bench lead (the cookie in
``HF_LOAD_SESSION``), asking the pages of ``lab.bench.lists`` named in ``HF_LOAD_PAGES`` (JSON:
role → ``[[name, path, params], …]``): the agent the case list and its filters (admin and API),
the approver the approver queue and its search, the lead the queues, the events and the
searches. Besides reading, the agent opens cases through the API's intake (one visit in
:data:`INTAKE_EVERY`, a new order and request key each, on the account in ``HF_LOAD_ACCOUNT``)
and the approver approves a proposal of the queue it may decide (one in :data:`APPROVE_EVERY`),
both with the bench lead's API token (``HF_LOAD_TOKEN``). Two approvers who chose the same
proposal get ``409 proposal_not_current`` for the second: the answer a person racing another
gets, recorded as a decision lost to a race, not as an error. Every answer is written as one
line ``surface<TAB>name<TAB>ms<TAB>error`` to ``HF_LOAD_OUT`` (``surface`` is ``admin`` or
``api``); :func:`summarise` reads them. Only the parsing and the arithmetic live outside
locust, so the tests need no load.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass

ADMIN, API = "admin", "api"
INTAKE_EVERY = 5  # an agent's visits: one in five opens a case
APPROVE_EVERY = 4  # an approver's visits: one in four approves one


def surface_of(path: str) -> str:
    return API if path.startswith("/api/") else ADMIN


def record(surface: str, name: str, ms: float, error: str | None) -> str:
    """One answer as the line :func:`summarise` reads (tabs and newlines out of the error)."""
    text = " ".join((error or "").split())
    return f"{surface}\t{name}\t{ms:.3f}\t{text}\n"


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile (as ``lab.bench.lists``); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-95 * len(ordered) // 100))  # ceil(0.95 n)
    return ordered[rank - 1]


@dataclass(frozen=True)
class LoadSummary:
    admin_p95_ms: float
    api_p95_ms: float
    requests: int
    errors: int
    first_errors: tuple[str, ...]


def summarise(lines: Iterable[str]) -> LoadSummary:
    """The admin's and the API's p95 and the errors of the answers ``record`` wrote; a line
    that is not one (a partial last line of a killed run) is an error too."""
    times: dict[str, list[float]] = {ADMIN: [], API: []}
    errors: list[str] = []
    requests = 0
    for raw in lines:
        if not raw.strip():
            continue
        requests += 1
        parts = raw.rstrip("\n").split("\t")
        try:
            surface, name, ms_text, error = parts
            ms = float(ms_text)
        except ValueError:
            errors.append(f"unreadable line: {raw.strip()[:80]}")
            continue
        if surface not in times:
            errors.append(f"unknown surface {surface!r}")
            continue
        times[surface].append(ms)
        if error:
            errors.append(f"{name}: {error}")
    return LoadSummary(
        admin_p95_ms=p95(times[ADMIN]),
        api_p95_ms=p95(times[API]),
        requests=requests,
        errors=len(errors),
        first_errors=tuple(errors[:5]),
    )


# Under locust only (started by ``lab.bench.load``, which sets the pages): the arithmetic above
# needs no locust, and importing it elsewhere would monkey-patch the process (gevent).
if os.environ.get("HF_LOAD_PAGES"):  # pragma: no cover - under locust
    import datetime as _dt

    from locust import HttpUser, between, events, task

    _PAGES: dict[str, list[list]] = json.loads(os.environ["HF_LOAD_PAGES"])
    _OUT = open(os.environ["HF_LOAD_OUT"], "a", buffering=1)  # noqa: SIM115 - for the run

    @events.request.add_listener
    def _written(request_type, name, response_time, response_length, exception, **kw):
        surface, _, page = name.partition(" ")
        _OUT.write(record(surface, page, response_time, repr(exception) if exception else None))

    class _Role(HttpUser):
        abstract = True
        wait_time = between(0.5, 1.5)
        role = ""

        def on_start(self) -> None:
            self.client.cookies.set("sessionid", os.environ["HF_LOAD_SESSION"])

        def read(self) -> None:
            """One page of the role's, read."""
            name, path, params = random.choice(_PAGES[self.role])  # noqa: S311 - not crypto
            with self.client.get(
                path, params=params, name=f"{surface_of(path)} {name}", catch_response=True
            ) as response:
                if response.status_code != 200:
                    response.failure(f"HTTP {response.status_code}")
                elif surface_of(path) == ADMIN and b"/admin/logout/" not in response.content:
                    response.failure("not logged in")

    _TOKEN = {"Authorization": f"Token {os.environ['HF_LOAD_TOKEN']}"}

    class Agent(_Role):
        role = "agent"
        weight = 10

        @task(INTAKE_EVERY - 1)
        def visit(self) -> None:
            self.read()

        @task(1)
        def open_case(self) -> None:
            """The agent's intake of a customer's request: a new order, a date next week."""
            tag = f"{random.getrandbits(48):012x}"
            today = _dt.datetime.now(_dt.UTC).date()
            day = today + _dt.timedelta(days=random.randint(7, 60))  # noqa: S311
            body = {
                "account": os.environ["HF_LOAD_ACCOUNT"],
                "request_key": f"load-{tag}",
                "order_id": f"ORD-LOAD-{tag}",
                "kind": "delivery_date",
                "change": {"delivery_date": day.isoformat()},
            }
            with self.client.post(
                "/api/cases/", json=body, headers=_TOKEN, name=f"{API} intake", catch_response=True
            ) as response:
                if response.status_code != 201:
                    response.failure(f"HTTP {response.status_code}: {response.text[:120]}")

    class Approver(_Role):
        role = "approver"
        weight = 6

        @task(APPROVE_EVERY - 1)
        def visit(self) -> None:
            self.read()

        @task(1)
        def approve(self) -> None:
            """The approver's decision: one proposal of the queue it may decide, approved."""
            queue = self.client.get(
                "/api/proposals/",
                params={"status": "awaiting_review"},
                headers=_TOKEN,
                name=f"{API} approver queue (to decide)",
            )
            if queue.status_code != 200:
                return  # recorded as that request's failure
            decidable = [p["id"] for p in queue.json()["results"] if p.get("may_decide")]
            if not decidable:
                return
            chosen = random.choice(decidable)  # noqa: S311 - not crypto
            with self.client.post(
                f"/api/proposals/{chosen}/approve/",
                json={},
                headers=_TOKEN,
                name=f"{API} approve",
                catch_response=True,
            ) as response:
                if response.status_code == 409 and b"proposal_not_current" in response.content:
                    response.success()  # another approver decided it first: a race, answered
                elif response.status_code != 200:
                    response.failure(f"HTTP {response.status_code}: {response.text[:120]}")

    class Lead(_Role):
        role = "lead"
        weight = 4

        @task
        def visit(self) -> None:
            self.read()
