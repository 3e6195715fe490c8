"""One scrape of ``/metrics``: this host's process metrics and the desk's state, read now.

The database gauges are read at scrape time, never counted: a held case shows on the first
scrape after it is held, and no process has to stay alive to remember it. Each gauge is one
bounded query that an index answers without reading every case: the open cases through the
status index (only open rows), the held and needs-attention ages through the events' chain
index of those cases alone, the overdue follow-ups through ``next_check_at`` (closed cases
have none), the inbound backlog through ``recon_inbound_processing``. ``docs/roles/operator.md``
has their plans at a million cases.

``GAUGES`` lists the readers in order. A reader is a function of ``now`` yielding metric
families; adding a gauge is one function and one line in ``GAUGES``. ``CASE_LABELS`` are
the labels the open-case count is grouped by (``("status", "kind")`` once cases have a kind).
"""

from __future__ import annotations

import datetime as dt
import hmac
import time
from collections.abc import Callable, Iterable, Iterator

from django.db import DatabaseError
from django.db.models import Count, Min, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cases.models import (
    OPEN_STATUSES,
    Case,
    CaseEvent,
    Notification,
    Status,
    WaitingOn,
    overdue_cutoff,
)
from reconciliation.health import worker_health
from reconciliation.metrics import process_registry
from reconciliation.models import InboundEvent

# The labels open cases are counted by: one line to change when cases get a kind.
CASE_LABELS: tuple[str, ...] = ("status",)
# Statuses whose oldest member's age is exported: they wait on a person.
AGED_STATUSES = (Status.HELD, Status.NEEDS_ATTENTION)
# Gauges always exported at zero for each status, so "none held" reads 0, not "no data".
_STATUS_ORDER = [status.value for status in Status if status in OPEN_STATUSES]


def _seconds(now: dt.datetime, then: dt.datetime | None) -> float:
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())


def open_cases(now: dt.datetime) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "holdfast_cases_open",
        "Open cases (not done, cancelled or stopped) by " + ", ".join(CASE_LABELS) + ".",
        labels=list(CASE_LABELS),
    )
    rows = (
        Case.objects.filter(status__in=_STATUS_ORDER)
        .order_by()
        .values_list(*CASE_LABELS)
        .annotate(count=Count("pk"))
    )
    counts = {tuple(str(v) for v in row[:-1]): row[-1] for row in rows}
    # Zeros for the statuses with no case, beside each combination of the other labels seen.
    others = {key[1:] for key in counts} or ({()} if len(CASE_LABELS) == 1 else set())
    for status in _STATUS_ORDER:
        for rest in sorted(others):
            counts.setdefault((status, *rest), 0)
    for key in sorted(counts, key=lambda k: (_STATUS_ORDER.index(k[0]), k[1:])):
        family.add_metric(list(key), counts[key])
    yield family


def oldest_in_status(now: dt.datetime) -> Iterator[Metric]:
    """How long the longest-waiting held (and needs-attention) case has been in that status:
    since its latest event that moved it there (its last update, for a case without one)."""
    family = GaugeMetricFamily(
        "holdfast_cases_oldest_in_status_seconds",
        "Seconds since the longest-waiting case of a status entered it (0 when none is).",
        labels=["status"],
    )
    for status in AGED_STATUSES:
        entered = (
            CaseEvent.objects.filter(case_id=OuterRef("pk"), to_status=status)
            .exclude(from_status=status)
            .order_by("-id")
            .values("created_at")[:1]
        )
        oldest = (
            Case.objects.filter(status=status)
            .annotate(entered=Coalesce(Subquery(entered), "updated_at"))
            .aggregate(oldest=Min("entered"))["oldest"]
        )
        family.add_metric([status.value], _seconds(now, oldest))
    yield family


def overdue_follow_ups(now: dt.datetime) -> Iterator[Metric]:
    overdue = Case.objects.overdue(now).order_by()
    counts = dict(
        overdue.values("waiting_on").annotate(count=Count("pk")).values_list("waiting_on", "count")
    )
    family = GaugeMetricFamily(
        "holdfast_cases_overdue",
        "Open cases whose follow-up time is past its grace (FOLLOW_UP_GRACE_MINUTES), by whom "
        "they wait on.",
        labels=["waiting_on"],
    )
    for waiting_on in WaitingOn.values:
        family.add_metric([waiting_on], counts.get(waiting_on, 0))
    yield family
    late = overdue.aggregate(check=Min("next_check_at"), person=Min("follow_up_at"))
    cutoff = overdue_cutoff(now)
    latest = min((t for t in late.values() if t is not None and t < cutoff), default=None)
    yield GaugeMetricFamily(
        "holdfast_cases_overdue_oldest_seconds",
        "How late the most overdue follow-up is (seconds past a person's follow-up time or the "
        "next check; 0 when none is).",
        value=_seconds(now, latest),
    )


def notification_backlog(now: dt.datetime) -> Iterator[Metric]:
    """Staff notifications whose email is still to go (pending or being sent), through the
    delivery sweep's own partial index, and how long the oldest has waited."""
    undelivered = Notification.objects.filter(
        email_state__in=[Notification.Email.PENDING, Notification.Email.SENDING]
    )
    yield GaugeMetricFamily(
        "holdfast_notifications_pending",
        "Staff notifications whose email is not delivered yet (pending or being sent).",
        value=undelivered.count(),
    )
    oldest = undelivered.aggregate(oldest=Min("created_at"))["oldest"]
    yield GaugeMetricFamily(
        "holdfast_notifications_oldest_pending_seconds",
        "Seconds the oldest undelivered staff notification has waited (0 when none does).",
        value=_seconds(now, oldest),
    )


def inbound_backlog(now: dt.datetime) -> Iterator[Metric]:
    """Inbound order events (webhooks) stored and not processed: pending, or failed."""
    pending = InboundEvent.Processing.PENDING
    failed = InboundEvent.Processing.FAILED
    family = GaugeMetricFamily(
        "holdfast_inbound_events_backlog",
        "Inbound order events (webhooks) received and not processed yet, by processing state.",
        labels=["processing"],
    )
    for state in (pending, failed):
        family.add_metric([state.value], InboundEvent.objects.filter(processing=state).count())
    yield family
    oldest = (
        InboundEvent.objects.filter(processing=pending)
        .order_by("received_at", "id")
        .values_list("received_at", flat=True)
        .first()
    )
    yield GaugeMetricFamily(
        "holdfast_inbound_events_oldest_pending_seconds",
        "Seconds since the oldest pending inbound event was received (0 when none is).",
        value=_seconds(now, oldest),
    )


def workers(now: dt.datetime) -> Iterator[Metric]:
    """The /readyz worker verdict and its evidence: cluster heartbeats (visible with the Redis
    broker) and the sweeper's schedule in the database."""
    health = worker_health(now=now)
    yield GaugeMetricFamily(
        "holdfast_workers_up",
        "1 when the worker side is alive (the /readyz verdict 'ok'), else 0.",
        value=1 if health.ok else 0,
    )
    yield GaugeMetricFamily(
        "holdfast_worker_heartbeats_visible",
        "1 when cluster heartbeats reach this process (Redis broker), else 0 (the ORM broker "
        "keeps them in each process: the sweeper's schedule is the evidence then).",
        value=1 if health.heartbeats_visible else 0,
    )
    beats = GaugeMetricFamily(
        "holdfast_worker_cluster_heartbeat_age_seconds",
        "Seconds since each running django-q2 cluster's last heartbeat.",
        labels=["host", "cluster"],
    )
    for beat in health.heartbeats:
        beats.add_metric([beat.host, beat.cluster_id], beat.age)
    yield beats
    if health.heartbeats:
        yield GaugeMetricFamily(
            "holdfast_worker_newest_heartbeat_age_seconds",
            "Seconds since the freshest heartbeat of any cluster.",
            value=health.heartbeats[0].age,
        )
    if health.schedule_overdue is not None:
        yield GaugeMetricFamily(
            "holdfast_sweeper_schedule_overdue_seconds",
            "Seconds the sweeper's minute schedule is past due (no cluster is scheduling when "
            "this grows past ~90).",
            value=health.schedule_overdue,
        )


GaugeReader = Callable[[dt.datetime], Iterable[Metric]]
GAUGES: list[GaugeReader] = [
    open_cases,
    oldest_in_status,
    overdue_follow_ups,
    inbound_backlog,
    notification_backlog,
    workers,
]


class DatabaseCollector(Collector):
    """The ``GAUGES``, read when collected; a database that does not answer is
    ``holdfast_database_up 0`` and the gauges are left out (the process metrics still go)."""

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        now = timezone.now()
        families: list[Metric] = []
        up = 1
        try:
            for reader in GAUGES:
                families.extend(reader(now))
        except DatabaseError:
            families, up = [], 0
        yield GaugeMetricFamily(
            "holdfast_database_up", "1 when the database answered this scrape's reads.", value=up
        )
        yield from families
        yield GaugeMetricFamily(
            "holdfast_metrics_database_seconds",
            "How long this scrape's database reads took.",
            value=time.perf_counter() - started,
        )


class _Forward(Collector):
    """Another registry's metrics, collected into this scrape's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()


def exposition(*, database: bool = True) -> bytes:
    """The Prometheus text of one scrape: this host's process metrics and, with ``database``,
    the desk's gauges (``/metrics``; ``manage.py serve_metrics`` on a worker host leaves them
    to the web's scrape)."""
    registry = CollectorRegistry()
    registry.register(_Forward(process_registry()))
    if database:
        registry.register(DatabaseCollector())
    return generate_latest(registry)


def bearer_ok(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (compared in constant
    time); always true when no token is configured."""
    if not token:
        return True
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )
