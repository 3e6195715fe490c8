"""Was this database restored from a backup? Detection only; recovery is
``reconciliation.restore_recovery``.

A leaf: it imports nothing of the apply, settlement or claim modules, so each of them can ask
before it acts (a claim calls ``restore_guard``; settlement, source checks, the dispatcher and
``run_worker`` call ``restore_detected``) while recovery builds on settlement.

Detection, two ways:

- From the host: the database carries an identity and an epoch (``SystemMarker`` named
  ``MARKER``); each worker host keeps the highest epoch it saw in a file outside the database.
  A database whose epoch is behind that file went back in time. The dispatcher advances the
  epoch on every tick (``marker_advance``).
- From the source, with no host file at all (a fresh host, a dump older than the marker): the
  order system has seen a fencing token above this database's sequence, or applied an operation
  whose key these records lack (or show as never sent). Every token comes from this database's
  sequence, so neither can happen unless the records went back in time. The dispatcher asks
  before it hands out claims, and a claim asks itself when nobody asked recently
  (``SOURCE_CHECK_MAX_AGE``); the answer of the last clean check is kept in the database
  (``SOURCE_MARKER``), so a restored copy carries an old one and is asked again.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import re
import uuid
from pathlib import Path

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from approvals.models import Operation
from cases import kinds
from cases.exceptions import CaseError
from cases.fencing import fencing_current
from cases.models import Attempt, SystemMarker
from reconciliation.client import OrderSystemClient
from reconciliation.exceptions import OrderSystemError

logger = logging.getLogger(__name__)

MARKER = "database"
# The last clean comparison with the order system: ``epoch`` holds this database's fencing
# sequence at that moment (every token up to it was accounted for), ``updated_at`` its time.
SOURCE_MARKER = "source"
SOURCE_CHECK_MAX_AGE = dt.timedelta(seconds=60)


class RecoveryRequired(CaseError):
    code = "recovery_required"
    http_status = 503


# --- detection from the host --------------------------------------------------------------


def _marker_file(identity: str) -> Path:
    # One file per database identity: hosts that talk to several databases (development,
    # tests) never mistake one database for a restored copy of another.
    return Path(settings.HOLDFAST_STATE_DIR) / f"database-{identity}.json"


def read_epoch(identity: str) -> int | None:
    """The epoch this host last saw for the database ``identity`` (its file), or None."""
    try:
        return int(json.loads(_marker_file(identity).read_text())["epoch"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def _write_epoch(identity: str, epoch: int) -> None:
    path = _marker_file(identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temporary file of this writer's own: dispatchers on one host write at the same time, and
    # a shared one could be moved into place by the other writer first.
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps({"identity": identity, "epoch": epoch}))
    tmp.replace(path)


def restore_detected() -> str:
    """Why this database looks restored, or '' if it does not."""
    marker = SystemMarker.objects.filter(name=MARKER).first()
    if marker is None:
        return ""
    return restore_detected_from(marker.identity, marker.epoch)


def restore_detected_from(identity: str | None, epoch: int | None) -> str:
    """:func:`restore_detected` for a marker the caller read itself (the claim reads it with the
    case, in the same query): ``None`` means no marker yet."""
    if identity is None or epoch is None:
        return ""
    seen = read_epoch(identity)
    if seen is not None and epoch < seen:
        # ``epoch`` was read before the file: this host's dispatcher may have advanced both in
        # between (it writes the file only after the database). Behind only if it still is.
        epoch = SystemMarker.objects.filter(name=MARKER).values_list("epoch", flat=True).first()
    if seen is not None and epoch is not None and epoch < seen:
        return (
            f"the database epoch {epoch} is behind {seen}, the last this host saw: "
            "it was restored from an older backup"
        )
    return ""


def restore_guard() -> None:
    """Refuse to start work on a database that went back in time until recovery ran."""
    why = restore_detected()
    if why:
        raise RecoveryRequired(
            f"Recovery after restore is required: {why}. Run `manage.py recover_after_restore`."
        )


def marker_advance() -> int:
    """Advance the database epoch and remember it outside the database. Returns the epoch."""
    marker, _ = SystemMarker.objects.get_or_create(
        name=MARKER, defaults={"identity": uuid.uuid4().hex, "epoch": 0}
    )
    SystemMarker.objects.filter(name=MARKER).update(epoch=F("epoch") + 1)
    marker.refresh_from_db()
    _write_epoch(marker.identity, marker.epoch)
    return marker.epoch


# --- detection from the source ------------------------------------------------------------


def source_verified(*, through: int | None = None) -> None:
    """Record a clean comparison with the order system: every token up to ``through`` (default:
    the sequence now) is accounted for."""
    through = fencing_current() if through is None else through
    SystemMarker.objects.update_or_create(
        name=SOURCE_MARKER, defaults={"identity": "order-system", "epoch": through}
    )


def source_check_forget() -> None:
    """The next claim or dispatch asks the order system again (something looked wrong)."""
    SystemMarker.objects.filter(name=SOURCE_MARKER).delete()


def source_check_due(now: dt.datetime | None = None) -> bool:
    marker = SystemMarker.objects.filter(name=SOURCE_MARKER).first()
    return source_check_due_from(marker.updated_at if marker else None, now)


def source_check_due_from(checked_at: dt.datetime | None, now: dt.datetime | None = None) -> bool:
    """:func:`source_check_due` for the last clean check's time the caller read itself."""
    now = now or timezone.now()
    return checked_at is None or checked_at < now - SOURCE_CHECK_MAX_AGE


@functools.cache
def _operation_key(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(prefix) for prefix in prefixes) or "(?!)"
    # The case's part: its number, after its team's prefix unless that is the deployment's
    # original prefix (``cases.references.operation_key_part``; keys made before per-team
    # references are all of that shape).
    return re.compile(rf"(?:{alternatives})-(?P<prefix>[A-Za-z]*)(?P<number>\d+)-\d+")


def operation_key_match(operation_key: str) -> re.Match[str] | None:
    """``operation_key`` as a case's operation key (``{prefix}-{case}-{sequence}``, a prefix
    of a change kind this desk offers); groups ``prefix`` (the team's, '' for the deployment's
    original one) and ``number`` name the case."""
    return _operation_key(tuple(kinds.key_prefixes())).fullmatch(operation_key)


def _holdfast_operation(operation_key: str) -> bool:
    # Only a case's operation keys (a kind's prefix, the case number, the sequence) count, on
    # any order. The capability probe writes
    # its sandbox order under keys of its own (PROBE-…), never a case's, so those never count;
    # drill cases on sandbox orders are cases like any other (the restore drill relies on it).
    return operation_key_match(operation_key) is not None


def restore_detected_at_source(
    *, client: OrderSystemClient | None = None, force: bool = False
) -> str:
    """Why the order system shows these records to be older than itself, or ''.

    Asks (one ``GET /fences/max``) only when no clean check is recent, unless ``force``. An
    order system that cannot answer proves nothing either way: '' is returned, the check stays
    due, and the write itself still carries the operation key and the fencing token.
    """
    if not force and not source_check_due():
        return ""
    marker = SystemMarker.objects.filter(name=SOURCE_MARKER).first()
    accounted = min(marker.epoch, fencing_current()) if marker else 0
    own_client = client is None
    client = client or OrderSystemClient.from_settings()
    try:
        seen = client.fences_seen(above=accounted)
    except OrderSystemError as exc:
        logger.warning("Could not compare these records with the order system: %s", exc)
        return ""
    finally:
        if own_client:
            client.close()
    # Read after the answer: a worker may claim (a new token) and write while the order system
    # is asked, and the answer then shows that token. Every token the answer shows was handed
    # out before it came; a sequence read before the question would call that a restore.
    local = fencing_current()
    if seen.max_token > local:
        return (
            f"the order system has seen fencing token {seen.max_token}, above this database's "
            f"sequence ({local}): these records are older than the order system"
        )
    ours = [item for item in seen.operations if _holdfast_operation(item.operation_key)]
    # Two reads for the whole answer, not two for each operation in it: a first claim after a
    # quiet spell checked every operation applied since the last check one by one (200 of them,
    # 400 reads, took a third of a second, which the case approved first waited through).
    known = {
        operation.key: operation
        for operation in Operation.objects.filter(key__in=[item.operation_key for item in ours])
    }
    sent = set(
        Attempt.objects.filter(operation__in=list(known.values()), submitted_at__isnull=False)
        .values_list("operation_id", flat=True)
        .distinct()
    )
    for item in ours:
        operation = known.get(item.operation_key)
        if operation is None:
            return (
                f"the order system applied {item.operation_key} (token {item.fencing_token}), "
                "an operation these records do not know"
            )
        if operation.confirmed_at is None and operation.pk not in sent:
            return (
                f"the order system applied {item.operation_key} (token {item.fencing_token}) "
                "while these records show no attempt that sent it"
            )
    through = seen.operations[-1].fencing_token if seen.truncated else local
    source_verified(through=through)
    return ""
