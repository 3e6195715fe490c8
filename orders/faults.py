"""Fault injection for tests, demos and drills (only when ``ORDERS_FAULTS_ENABLED``).

Rules live in the database because the server is multi-threaded and tests steer it over HTTP.
A rule matches a request whose path starts with its ``path_prefix``; each match counts down
``remaining`` (``None``: until cleared). The commit-related kinds match only writes (POST).
Control paths (``/_faults/``, ``/_testing/``) and ``/healthz`` are never faulted.
"""

from __future__ import annotations

import functools

from django.conf import settings
from django.db import connection
from django.db.models import F

from orders.exceptions import invalid
from orders.models import FaultRule, TestingReset

Kind = FaultRule.Kind
WRITE_ONLY_KINDS = {Kind.DROP_AFTER_COMMIT, Kind.DELAY_AFTER_COMMIT, Kind.FAIL_BEFORE_COMMIT}
SECONDS_KINDS = {Kind.DELAY_AFTER_COMMIT, Kind.LATENCY, Kind.SEARCH_LAG}


def faults_enabled() -> bool:
    """Never in production, whatever ``ORDERS_FAULTS_ENABLED`` says (settings refuse it too)."""
    return bool(settings.ORDERS_FAULTS_ENABLED) and not settings.PRODUCTION


def fault_add(
    *,
    kind: str,
    path_prefix: str = "/",
    times: int | None = 1,
    seconds: float = 0.0,
    retry_after: int | None = None,
) -> FaultRule:
    fields = {}
    if kind not in Kind.values or kind == Kind.SEARCH_LAG:
        fields["kind"] = "Unknown fault kind (search lag has its own endpoint)."
    if not isinstance(path_prefix, str) or not path_prefix.startswith("/"):
        fields["path_prefix"] = "Must be a path starting with '/'."
    if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 1):
        fields["times"] = "Must be a positive integer, or null for until cleared."
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        fields["seconds"] = "Must be a non-negative number."
    elif kind in SECONDS_KINDS and seconds <= 0:
        fields["seconds"] = "This kind needs a positive number of seconds."
    if retry_after is not None and (
        isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0
    ):
        fields["retry_after"] = "Must be a non-negative integer."
    if fields:
        raise invalid(fields)
    return FaultRule.objects.create(
        kind=kind,
        path_prefix=path_prefix,
        remaining=times,
        seconds=float(seconds),
        retry_after=retry_after,
    )


def search_lag_set(*, seconds: object) -> FaultRule:
    """Replace the search lag applied to operations applied from now on; ``seconds`` is the
    caller's raw JSON value, refused as ``invalid_field`` unless a non-negative number."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise invalid({"seconds": "Must be a non-negative number."})
    FaultRule.objects.filter(kind=Kind.SEARCH_LAG).delete()
    return FaultRule.objects.create(kind=Kind.SEARCH_LAG, seconds=float(seconds), remaining=None)


_SEARCH_LAG_SQL = (
    'SELECT "orders_faultrule"."seconds" FROM "orders_faultrule" '
    'WHERE "orders_faultrule"."kind" = %s ORDER BY "orders_faultrule"."id" DESC LIMIT 1'
)


def search_lag_seconds() -> float:
    """The lag of the search index: an injected one if set, else ``ORDERS_SEARCH_LAG_SECONDS``."""
    if faults_enabled():
        # ``FaultRule.objects.filter(kind=SEARCH_LAG).order_by("-id").first()``, as plain SQL:
        # it is read in every write's transaction.
        with connection.cursor() as cursor:
            cursor.execute(_SEARCH_LAG_SQL, [Kind.SEARCH_LAG.value])
            row = cursor.fetchone()
        if row is not None:
            return float(row[0])
    return float(settings.ORDERS_SEARCH_LAG_SECONDS)


def reset_mark() -> int:
    """The id of the last testing reset (0 before any): it changes with every reset."""
    return TestingReset.objects.order_by("-id").values_list("id", flat=True).first() or 0


def faults_list() -> list[FaultRule]:
    return list(FaultRule.objects.all())


def faults_clear() -> None:
    FaultRule.objects.all().delete()


def is_faultable(path: str) -> bool:
    return not (path.startswith("/_") or path == "/healthz")


def faults_live(kinds: set[str], *, path: str, method: str) -> list[FaultRule]:
    """The live rules of ``kinds`` that could match this request, in one read (the middleware
    asks once before the view and once after it, not once per kind)."""
    if not faults_enabled() or not is_faultable(path):
        return []
    wanted = kinds if method == "POST" else kinds - WRITE_ONLY_KINDS
    if not wanted:
        return []
    kinds_in = sorted(wanted)
    # The ORM's ``filter(Q(remaining__isnull=True) | Q(remaining__gt=0), kind__in=...)`` in
    # the model's order (``id``), as plain SQL (it runs twice on every request), for the
    # columns ``fault_take`` reads; the rules come back as ``FaultRule`` rows.
    sql = _live_sql(len(kinds_in))
    with connection.cursor() as cursor:
        cursor.execute(sql, [0, *(str(kind) for kind in kinds_in)])
        rows = cursor.fetchall()
    return [FaultRule.from_db(connection.alias, _LIVE_COLUMNS, row) for row in rows]


_LIVE_COLUMNS = ["id", "kind", "path_prefix", "remaining", "seconds", "retry_after"]


@functools.cache
def _live_sql(kinds: int) -> str:
    """The live-rules read for ``kinds`` kinds: constants and one placeholder per kind."""
    columns = ", ".join(f'"orders_faultrule"."{name}"' for name in _LIVE_COLUMNS)
    placeholders = ", ".join(["%s"] * kinds)
    return (
        f'SELECT {columns} FROM "orders_faultrule" '  # noqa: S608 - constants only
        'WHERE (("orders_faultrule"."remaining" IS NULL OR "orders_faultrule"."remaining" > %s) '
        f'AND "orders_faultrule"."kind" IN ({placeholders})) '
        'ORDER BY "orders_faultrule"."id" ASC'
    )


def fault_take(
    kind: str, *, path: str, method: str, live: list[FaultRule] | None = None
) -> FaultRule | None:
    """Consume one use of the oldest live rule of ``kind`` matching this request, if any
    (``live``: the rules :func:`faults_live` read for this request; read here otherwise).

    The count-down is a conditional update, so concurrent requests never share one use.
    """
    if not faults_enabled() or not is_faultable(path):
        return None
    if kind in WRITE_ONLY_KINDS and method != "POST":
        return None
    if live is None:
        live = faults_live({kind}, path=path, method=method)
    for rule in (rule for rule in live if rule.kind == kind):
        if not path.startswith(rule.path_prefix):
            continue
        if rule.remaining is None:
            return rule
        taken = FaultRule.objects.filter(pk=rule.pk, remaining__gt=0).update(
            remaining=F("remaining") - 1
        )
        if taken:
            return rule
    return None
