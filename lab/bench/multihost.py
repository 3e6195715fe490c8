"""A backlog applied by django-q2 clusters on several worker hosts sharing the Redis broker.

Each host is a network namespace with its own address (``lab.bench.netns``);
its ``qcluster`` reaches PostgreSQL, Redis and the order system through forwarders listening
in the hosts' hub namespace. All hosts get one ``Q_CLUSTER_NAME`` (``config.settings``:
django-q2's cluster name, which names the Redis list ``django_q:<name>:q`` and its stats and
salts the signature of every task), so they pop one list; a name unique to the run leaves
every other queue alone, and its keys are deleted afterwards. This process enqueues onto that
list with a broker of its own (``redis_cluster``: signed for that name), whatever its own
settings' broker and name are.

``measure_multihost`` is the benchmark's figure (applies/s for the hosts together); the helpers
are shared with ``tests/lab/test_multihost.py``.

Measurement only: nothing here changes how Holdfast works.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from lab.bench.netns import (
    ROOT,
    Host,
    HostsUnavailable,
    Network,
    qclusters,
    unavailable_reason,
    worker_network,
)

APPLY = "reconciliation.tasks.apply_case"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class MultihostError(RuntimeError):
    """The hosts did not apply the backlog as they should (the message says what happened)."""


def redis_url() -> str:
    """The Redis the hosts share: ``HOLDFAST_MULTIHOST_REDIS_URL``, else ``REDIS_URL``, else the
    local server's database 0 (only keys under this run's cluster name are touched)."""
    return (
        os.environ.get("HOLDFAST_MULTIHOST_REDIS_URL")
        or os.environ.get("REDIS_URL")
        or DEFAULT_REDIS_URL
    )


def database_url() -> str:
    """The URL of the database this process uses (PostgreSQL: another host cannot reach an
    SQLite file or a test's in-memory database)."""
    if connection.vendor != "postgresql":
        raise HostsUnavailable(f"worker hosts need PostgreSQL, not {connection.vendor}")
    db = connection.settings_dict
    auth = quote(db["USER"] or "postgres", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = db["HOST"] or "127.0.0.1"
    port = db["PORT"] or 5432
    return f"postgres://{auth}@{host}:{port}/{quote(db['NAME'], safe='')}"


def cluster_name(purpose: str) -> str:
    return f"holdfast-{purpose}-{uuid.uuid4().hex[:8]}"


def redis_client(url: str) -> Any:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise HostsUnavailable(f"no Redis at {url}: {exc}") from exc
    return client


@contextlib.contextmanager
def redis_cluster(url: str, name: str) -> Iterator[Any]:
    """A django-q2 Redis broker for cluster ``name`` at ``url``, whatever this process's own
    settings say: ``async_task(..., broker=it)`` lands where that cluster's hosts pop, signed as
    they check it (django-q2 salts signatures with the cluster name). Every key of the cluster
    is deleted on exit."""
    from django_q import core_signing
    from django_q.brokers.redis_broker import Redis
    from django_q.signing import PickleSerializer, SignedPackage

    client = redis_client(url)

    class _Broker(Redis):
        def get_connection(self, list_key: str | None = None) -> Any:
            return client

        def enqueue(self, task: str) -> Any:
            resigned = core_signing.dumps(
                SignedPackage.loads(task),  # as this process signed it
                key=settings.SECRET_KEY,
                salt=name,
                serializer=PickleSerializer,
            )
            return super().enqueue(resigned)

    try:
        yield _Broker(list_key=name)
    finally:
        keys = list(client.scan_iter(match=f"django_q:{name}:*"))
        if keys:
            client.delete(*keys)
        client.close()


def enqueue_applies(broker: Any, case_ids: Iterable[int]) -> None:
    """One ``apply_case`` task per case, as the dispatcher enqueues them."""
    from django_q.tasks import async_task

    for pk in case_ids:
        async_task(APPLY, pk, group="apply_case", broker=broker)


def probe_relayed(network: Network, orders_base_url: str) -> None:
    """Probe the order system at the address the hosts use, from the first host
    (``manage.py probe_order_system`` inside it, through the forwarders), with the sandbox
    order of its latest profile at ``orders_base_url``: a profile belongs to a base URL, and the
    hosts' workers look theirs up by the one they are given. This process cannot reach that
    address: the hosts' network is not this machine's own."""
    from reconciliation.selectors import current_profile

    known = current_profile(orders_base_url)
    if known is None or known.autonomy != "autonomous":
        raise HostsUnavailable(
            f"the order system at {orders_base_url} has no autonomous profile to repeat"
        )
    host = network.hosts[0]
    relayed = network.urls["orders"]
    result = subprocess.run(  # noqa: S603 - ip netns exec, our interpreter
        host.argv(
            sys.executable,
            "manage.py",
            "probe_order_system",
            "--order",
            known.sandbox_order_id,
            "--url",
            relayed,
        ),
        cwd=ROOT,
        env=network.host_env(host, host_env()),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    profile = current_profile(relayed)
    if result.returncode != 0 or profile is None or profile.autonomy != "autonomous":
        raise MultihostError(
            f"the order system through the hosts' forwarder is not autonomous "
            f"(probe from {host.hostname} exited {result.returncode}):\n"
            f"{(result.stdout + result.stderr)[-2000:]}"
        )


def host_env(**extra: str) -> dict[str, str]:
    """The base environment of a host's processes (``Network.host_env`` adds the rest)."""
    env = {**os.environ, "Q_WORKERS": "2", **extra}
    env["APPROVAL_GRANT_KEY"] = settings.APPROVAL_GRANT_KEY
    return env


def wait_settled(
    case_ids: list[int],
    hosts: list[Host],
    *,
    timeout: float,
    settled: Iterable[str] = ("done",),
    any_host_alive: bool = False,
) -> None:
    """Wait until every case's status is in ``settled``; a host that exits fails it (all of
    them must stay up, or only one with ``any_host_alive``)."""
    from cases.models import Case

    statuses = list(settled)
    deadline = time.monotonic() + timeout
    while True:
        left = Case.objects.filter(pk__in=case_ids).exclude(status__in=statuses)
        if not left.exists():
            return
        dead = [host for host in hosts if not host.alive]
        if dead and (not any_host_alive or len(dead) == len(hosts)):
            raise MultihostError(
                f"the qcluster on {dead[0].hostname} exited:\n{dead[0].output()[-2000:]}"
            )
        if time.monotonic() > deadline:
            stuck = dict(left.values_list("reference", "status")[:5])
            raise MultihostError(
                f"{left.count()} of {len(case_ids)} cases not {'/'.join(statuses)} after "
                f"{timeout:.0f}s: {stuck}\n{_trails(left[:3])}\n{_log_tails(hosts)}"
            )
        time.sleep(0.05)


def _trails(cases: Iterable[Any]) -> str:
    """What happened to ``cases``: each one's audit trail and attempts, for a failure message."""
    lines = []
    for case in cases:
        lines.append(f"{case.reference} ({case.status}, next check {case.next_check_at}):")
        for event in case.events.order_by("id"):
            lines.append(
                f"  {event.created_at:%H:%M:%S.%f} {event.actor_label}: {event.action} "
                f"{event.from_status}->{event.to_status} {event.reason[:300]}"
            )
        for attempt in case.attempts.order_by("sequence"):
            lines.append(
                f"  attempt {attempt.reference} {attempt.worker} {attempt.state} "
                f"claimed {attempt.claimed_at:%H:%M:%S.%f} lease {attempt.lease_expires_at}"
            )
    return "\n".join(lines)


def _log_tails(hosts: list[Host], size: int = 3000) -> str:
    return "\n".join(f"--- {host.hostname}:\n{host.output()[-size:]}" for host in hosts)


def host_of(worker_label: str, hosts: list[Host]) -> str:
    """The hostname a ``Worker`` label (``kind:hostname:pid``) names, if it is one of ``hosts``."""
    parts = worker_label.split(":")
    name = parts[1] if len(parts) >= 3 else ""
    return name if any(host.hostname == name for host in hosts) else ""


def applies_by_host(case_ids: list[int], hosts: list[Host]) -> Counter[str]:
    """Succeeded attempts per host (``""``: a worker of none of them)."""
    from cases.models import Attempt

    labels = Attempt.objects.filter(
        case_id__in=case_ids, state=Attempt.State.SUCCEEDED
    ).values_list("worker", flat=True)
    return Counter(host_of(label, hosts) for label in labels)


def measure_multihost(
    *,
    count: int,
    orders_base_url: str,
    make_backlog: Callable[[int], dict[int, str]],
    check_orders: Callable[[dict[int, str]], None],
    log_dir: Path,
    hosts: int = 2,
    workers: int = 2,
    timeout: float = 300.0,
) -> float:
    """Applies per second of ``count`` approved ready cases (``make_backlog``: ``{case_pk:
    order_id}``, their enqueues held back and ``next_check_at`` cleared) applied by ``hosts``
    qclusters of ``workers`` workers each, in their own network namespaces, sharing a Redis
    broker of a cluster name unique to this call; timed from the first enqueue to the last case
    done. ``check_orders`` raises unless every order changed exactly once (the order system's
    records); every host must have applied some of them (else ``MultihostError``). Raises
    ``HostsUnavailable`` when this machine cannot run worker hosts (the message says why)."""
    if reason := unavailable_reason():
        raise HostsUnavailable(reason)
    url = redis_url()
    redis_client(url).close()
    name = cluster_name("bench")
    log_dir.mkdir(parents=True, exist_ok=True)
    with worker_network(
        hosts,
        database_url=database_url(),
        redis_url=url,
        orders_url=orders_base_url,
        log_dir=log_dir,
    ) as network:
        probe_relayed(network, orders_base_url)
        made = make_backlog(count)
        ids = list(made)
        env = host_env(Q_WORKERS=str(workers), Q_CLUSTER_NAME=name)
        with (
            redis_cluster(url, name) as broker,
            qclusters(network, env=env) as running,
        ):
            start = time.perf_counter()
            enqueue_applies(broker, ids)
            wait_settled(ids, running, timeout=timeout)
            elapsed = time.perf_counter() - start
        check_orders(made)
        split = applies_by_host(ids, network.hosts)
        idle = [host.hostname for host in network.hosts if not split[host.hostname]]
        if idle or split[""]:
            raise MultihostError(f"not every host applied cases: {dict(split)}")
    return count / elapsed
