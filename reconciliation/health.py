"""Is the worker side alive? One verdict for ``/readyz`` and ``manage.py worker_health``.

Two kinds of evidence, both read without touching a case:

- **Cluster heartbeats.** Every running django-q2 cluster saves its status (``Stat``) on the
  broker every guard cycle (half a second) with a three-second expiry. With the Redis broker
  (``REDIS_URL``) they live in Redis, where every host sees every cluster. With the ORM broker
  django-q2 keeps them in Django's ``default`` cache, which is memory local to each process:
  another process cannot see them, so they are not evidence there.
- **The sweeper's schedule** in the database (``Keep the sweeper running``: the minute schedule
  that restarts ``reconciliation.tasks.sweeper``). Each cluster's scheduler runs due schedules
  about every 30 seconds and moves ``next_run`` past now, so while any cluster runs, the
  schedule is never much more than 30 seconds overdue; one whose ``task`` is empty never ran.

The verdict (``ok``, ``stale`` or ``none``): where heartbeats are visible, ``ok`` means a
cluster reported within ``CLUSTER_STALE_SECONDS``; otherwise ``ok`` means the sweeper's
schedule is at most ``SCHEDULE_STALE_SECONDS`` overdue. ``none`` means no worker has ever shown
itself (no heartbeat and a schedule that never ran), ``stale`` that one did and stopped.
``run_worker`` (the one-process worker) runs neither a cluster nor the scheduler, so it is
invisible here. The check costs one query (the schedule) and one broker read; it reports ages
and counts only, never host names or anything about cases.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal

from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.utils import timezone

from reconciliation.sweep import SWEEPER_TASK

Verdict = Literal["ok", "stale", "none"]

# A cluster saves its status every 0.5 s and the broker forgets it after 3 s: an older one is
# a cluster that stopped reporting.
CLUSTER_STALE_SECONDS = 10.0
# The scheduler looks every ~30 s: three missed looks mean no cluster is scheduling.
SCHEDULE_STALE_SECONDS = 90.0


@dataclass(frozen=True)
class ClusterHeartbeat:
    """One running cluster's last heartbeat as the broker holds it."""

    cluster_id: str
    host: str
    age: float
    workers: int


@dataclass(frozen=True)
class WorkerHealth:
    """What the worker side showed of itself, and the verdict drawn from it."""

    verdict: Verdict
    heartbeats_visible: bool
    # Age in seconds of each cluster's last heartbeat, freshest first (empty when not visible).
    cluster_ages: list[float] = field(default_factory=list)
    cluster_workers: int = 0
    # Seconds the sweeper's schedule is past due (0 when not yet due); None when it never ran.
    schedule_overdue: float | None = None
    error: str = ""
    # Each running cluster's last heartbeat, freshest first (empty when not visible).
    heartbeats: tuple[ClusterHeartbeat, ...] = ()

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "workers": self.verdict,
            "heartbeats_visible": self.heartbeats_visible,
            "clusters": len([age for age in self.cluster_ages if age <= CLUSTER_STALE_SECONDS]),
            "cluster_heartbeat_age_seconds": (
                round(self.cluster_ages[0], 1) if self.cluster_ages else None
            ),
            "cluster_workers": self.cluster_workers,
            "sweeper_schedule_overdue_seconds": (
                None if self.schedule_overdue is None else round(self.schedule_overdue, 1)
            ),
        }
        if self.error:
            body["error"] = self.error
        return body


def heartbeats_visible(broker: Any) -> bool:
    """Whether cluster heartbeats saved by other processes reach this one: a broker that
    stores them itself (Redis), or a cache shared between processes."""
    from django_q.brokers import Broker

    if type(broker).get_stats is not Broker.get_stats:
        return True
    cache = getattr(broker, "cache", None)
    return cache is not None and not isinstance(cache, LocMemCache | DummyCache)


def cluster_heartbeats(broker: Any, now: dt.datetime) -> list[ClusterHeartbeat]:
    """The last heartbeat of every running cluster the broker shows, freshest first."""
    from django_q.conf import Conf
    from django_q.status import Stat

    running = {str(s) for s in (Conf.IDLE, Conf.WORKING, Conf.STARTING)}
    beats: list[ClusterHeartbeat] = []
    for stat in Stat.get_all(broker=broker):
        if str(getattr(stat, "status", "")) not in running:
            continue
        stamp = getattr(stat, "timestamp", None)
        if stamp is None:
            continue
        beats.append(
            ClusterHeartbeat(
                cluster_id=str(getattr(stat, "cluster_id", "")),
                host=str(getattr(stat, "host", "")),
                age=max(0.0, (now - stamp).total_seconds()),
                workers=len(getattr(stat, "workers", [])),
            )
        )
    beats.sort(key=lambda beat: beat.age)
    return beats


def _schedule_overdue(now: dt.datetime) -> float | None:
    """Seconds the sweeper's schedule is past due, ``None`` if it never ran (or is missing)."""
    from django_q.models import Schedule

    row = (
        Schedule.objects.filter(func=SWEEPER_TASK)
        .exclude(task__isnull=True)
        .exclude(task="")
        .order_by("-next_run")
        .values_list("next_run", flat=True)
        .first()
    )
    if row is None:
        return None
    return max(0.0, (now - row).total_seconds())


def worker_health(*, now: dt.datetime | None = None) -> WorkerHealth:
    """The worker verdict from the cluster heartbeats and the sweeper's schedule.

    A broker that cannot be read is ``stale`` with the error named (the workers use the same
    broker); a database that cannot be read raises, for the caller to report.
    """
    from django_q.brokers import get_broker

    now = now or timezone.now()
    overdue = _schedule_overdue(now)
    try:
        broker = get_broker()
        visible = heartbeats_visible(broker)
        beats = cluster_heartbeats(broker, now) if visible else []
    except Exception as exc:  # noqa: BLE001 - any broker failure is "cannot see the workers"
        return WorkerHealth(
            verdict="stale",
            heartbeats_visible=False,
            schedule_overdue=overdue,
            error=f"broker unreadable: {type(exc).__name__}",
        )
    ages = [beat.age for beat in beats]
    workers = sum(beat.workers for beat in beats if beat.age <= CLUSTER_STALE_SECONDS)
    if visible:
        alive = bool(ages) and ages[0] <= CLUSTER_STALE_SECONDS
    else:
        alive = overdue is not None and overdue <= SCHEDULE_STALE_SECONDS
    verdict: Verdict
    if alive:
        verdict = "ok"
    elif ages or overdue is not None:
        verdict = "stale"
    else:
        verdict = "none"
    return WorkerHealth(
        verdict=verdict,
        heartbeats_visible=visible,
        cluster_ages=ages,
        cluster_workers=workers,
        schedule_overdue=overdue,
        heartbeats=tuple(beats),
    )
