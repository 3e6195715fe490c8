"""The hash chain over the audit log: each case's events form one chain.

Every ``CaseEvent`` stores ``prev_hash`` (the ``hash`` of the case's previous event, ``""`` for
its first) and ``hash``: SHA-256 over a canonical JSON of its own immutable fields and
``prev_hash``. Rewriting, deleting or inserting an event in the middle of a chain breaks the
link at that event; ``verify_chains`` (``manage.py audit_verify``) finds the first broken link.

The chain is extended by ``cases.kernel.record_event`` only, and correctness relies on every
writer holding the case's row lock (``lock_case``, or the claim's conditional UPDATE) while it
appends: the lock serializes the read of the previous hash and the insert, so two events of
one case never share a predecessor. The event id is not hashed (it is assigned by the insert,
and an event is never updated afterwards); the chain order is the id order.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

# The fields a hash covers, in the order ``event_hash`` takes them. ``case_id`` and
# ``actor_id`` are primary keys: a purge or a rename of the case or the user changes nothing.
HASHED_FIELDS = (
    "case_id",
    "action",
    "from_status",
    "to_status",
    "reason",
    "actor_id",
    "actor_label",
    "version",
    "detail",
    "created_at",
)


def _normalize(value: Any) -> Any:
    """``value`` as the JSON column gives it back on every backend: PostgreSQL's jsonb keeps
    numbers as decimals, so an integral float such as ``1e20`` reads back as an integer."""
    if isinstance(value, float):
        exact = Decimal(repr(value))
        return int(exact) if value.is_integer() else value
    if isinstance(value, dict):
        return {key: _normalize(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalize(item) for item in value]
    return value


def canonical_timestamp(value: dt.datetime) -> str:
    """A time as the canonical document writes it (UTC, to the microsecond)."""
    return value.astimezone(dt.UTC).isoformat(timespec="microseconds")


def canonical(
    *,
    case_id: int,
    action: str,
    from_status: str,
    to_status: str,
    reason: str,
    actor_id: int | None,
    actor_label: str,
    version: int,
    detail: Any,
    created_at: dt.datetime,
    prev_hash: str,
) -> bytes:
    """The bytes an event's hash is computed over (sorted keys, no whitespace, UTF-8)."""
    # A round trip through JSON first: tuples become lists and non-string keys strings,
    # exactly as the stored detail reads back.
    stored_detail = _normalize(json.loads(json.dumps(detail)))
    document = {
        "action": action,
        "actor_id": actor_id,
        "actor_label": actor_label,
        "case_id": case_id,
        "created_at": canonical_timestamp(created_at),
        "detail": stored_detail,
        "from_status": from_status,
        "prev_hash": prev_hash,
        "reason": reason,
        "to_status": to_status,
        "version": version,
    }
    return _encoded(document)


def _encoded(document: dict[str, Any]) -> bytes:
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def event_hash(**fields: Any) -> str:
    """SHA-256 (hex) of ``canonical(**fields)``."""
    return hashlib.sha256(canonical(**fields)).hexdigest()


# --- the same hash, computed by PostgreSQL ---------------------------------------------------
# For a statement that writes an event whose fields it reads in the same statement (the claim,
# ``cases.kernel.pg_claim_statement``): the canonical JSON written out as text, then hashed by
# the server. ``tests/cases/test_audit_sql.py`` holds it byte for byte to :func:`canonical`.


@dataclass(frozen=True)
class Sql:
    """A SQL expression for one value of the canonical document: ``text`` (a JSON string),
    ``int`` (a JSON integer) or ``object`` (a JSON object of further values, ``fields``). A
    NULL of any kind is JSON ``null``."""

    kind: str
    expr: str = ""
    fields: dict[str, Sql] = field(default_factory=dict)


def canonical_sql(document: dict[str, Sql]) -> str:
    """A PostgreSQL text expression that is :func:`_encoded`'s output for the document whose
    values the expressions give: keys sorted as Python sorts them, no whitespace, strings
    escaped as ``json.dumps(ensure_ascii=False)`` escapes them (PostgreSQL's ``to_json`` of a
    text escapes the same characters the same way: the quote, the backslash and the control
    characters, as ``\\n`` … or ``\\u00XX``)."""
    parts = []
    for index, key in enumerate(sorted(document)):
        value = document[key]
        comma = "," if index else ""
        parts.append(f"'{comma}' || {_json_literal(key)} || ':' || {_value_sql(value)}")
    return "('{' || " + " || ".join(parts) + " || '}')"


def _json_literal(key: str) -> str:
    text = json.dumps(key, ensure_ascii=False)
    return "'" + text.replace("'", "''") + "'"


def _value_sql(value: Sql) -> str:
    if value.kind == "object":
        return canonical_sql(value.fields)
    if value.kind == "text":
        return f"COALESCE(to_json(({value.expr})::text)::text, 'null')"
    if value.kind == "int":
        return f"COALESCE((({value.expr})::bigint)::text, 'null')"
    raise ValueError(f"unknown kind {value.kind!r}")


def hash_sql(document: dict[str, Sql], prev_hash: str) -> str:
    """PostgreSQL's :func:`event_hash` of the document (``prev_hash`` a text expression, part of
    it as in :func:`canonical`): SHA-256 of the UTF-8 bytes, in hex."""
    whole = {**document, "prev_hash": Sql("text", prev_hash)}
    return f"encode(sha256(convert_to({canonical_sql(whole)}, 'UTF8')), 'hex')"


# --- the accounts' chains ----------------------------------------------------------------------
# An account's own events (``AccountEvent``) form one chain per account, built the same way:
# the writer holds the account's row lock while it reads the head and appends
# (``cases.account_events``).

ACCOUNT_HASHED_FIELDS = (
    "account_id",
    "action",
    "reason",
    "actor_id",
    "actor_label",
    "detail",
    "created_at",
)


def account_event_hash(
    *,
    account_id: int,
    action: str,
    reason: str,
    actor_id: int | None,
    actor_label: str,
    detail: Any,
    created_at: dt.datetime,
    prev_hash: str,
) -> str:
    """SHA-256 (hex) over an account event's canonical JSON and ``prev_hash``."""
    document = {
        "account_id": account_id,
        "action": action,
        "actor_id": actor_id,
        "actor_label": actor_label,
        "created_at": canonical_timestamp(created_at),
        "detail": _normalize(json.loads(json.dumps(detail))),
        "prev_hash": prev_hash,
        "reason": reason,
    }
    return hashlib.sha256(_encoded(document)).hexdigest()


def stored_hash(event: Any, prev_hash: str | None = None) -> str:
    """The hash an event (a model instance, historical or not) should carry; ``prev_hash``
    defaults to the one it stores."""
    fields = {name: getattr(event, name) for name in HASHED_FIELDS}
    return event_hash(**fields, prev_hash=event.prev_hash if prev_hash is None else prev_hash)


# --- verification ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokenLink:
    """The first event of a case's chain that does not hold.

    ``kind`` is ``"link"`` when the event's ``prev_hash`` is not the hash of the case's
    previous event (an event before it was removed, rewritten or inserted), ``"hash"`` when
    its own fields no longer give its stored hash (the event was rewritten).
    """

    case_reference: str
    event_id: int
    kind: str
    expected: str
    stored: str

    def describe(self) -> str:
        what = "prev_hash" if self.kind == "link" else "hash"
        return (
            f"{self.case_reference}: broken link at event {self.event_id} ({what}): "
            f"expected {self.expected or '(none)'}, stored {self.stored or '(none)'}"
        )


@dataclass
class VerifyResult:
    cases: int = 0
    events: int = 0
    broken: list[BrokenLink] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.broken


Progress = Callable[[int, int], None]

_COLUMNS = ("id", "case_id", "case__reference", "prev_hash", "hash", *HASHED_FIELDS[1:])


def _chain_rows(
    queryset, batch_size: int, *, group: str, columns: tuple[str, ...]
) -> Iterator[dict[str, Any]]:
    """Every row of ``queryset`` in chain order ``(group, id)``, read in keyset-paginated
    batches so memory stays constant however long the log is."""
    from django.db.models import Q

    last: tuple[int, int] | None = None
    while True:
        page = queryset
        if last is not None:
            # ``group >= …`` lets the (group, id) index start at the last chain; the rest
            # skips what that chain's previous batch already read.
            page = page.filter(**{f"{group}__gte": last[0]}).filter(
                Q(**{f"{group}__gt": last[0]}) | Q(id__gt=last[1])
            )
        rows = list(page.order_by(group, "id").values(*columns)[:batch_size])
        yield from rows
        if len(rows) < batch_size:
            return
        last = (rows[-1][group], rows[-1]["id"])


def _walk(
    rows: Iterator[dict[str, Any]],
    *,
    group: str,
    reference: str,
    expected_hash: Callable[[dict[str, Any]], str],
    batch_size: int,
    progress: Progress | None,
) -> VerifyResult:
    """Check each chain's links in order and collect the first broken link of each."""
    result = VerifyResult()
    current: int | None = None
    expected_prev = ""
    broken_chain = False
    for row in rows:
        if row[group] != current:
            current, expected_prev, broken_chain = row[group], "", False
            result.cases += 1
        result.events += 1
        if progress is not None and result.events % batch_size == 0:
            progress(result.cases, result.events)
        if broken_chain:
            continue
        link: BrokenLink | None = None
        if row["prev_hash"] != expected_prev:
            link = BrokenLink(row[reference], row["id"], "link", expected_prev, row["prev_hash"])
        else:
            expected = expected_hash(row)
            if expected != row["hash"]:
                link = BrokenLink(row[reference], row["id"], "hash", expected, row["hash"])
        if link is not None:
            result.broken.append(link)
            broken_chain = True
        expected_prev = row["hash"]
    return result


def verify_chains(
    *, case_reference: str | None = None, batch_size: int = 2000, progress: Progress | None = None
) -> VerifyResult:
    """Walk every case's chain (or one case's) and collect the first broken link of each
    broken chain. ``progress(cases, events)`` is called after every batch."""
    from cases.models import CaseEvent

    queryset = CaseEvent.objects.all()
    if case_reference is not None:
        queryset = queryset.filter(case__reference=case_reference)
    return _walk(
        _chain_rows(queryset, batch_size, group="case_id", columns=_COLUMNS),
        group="case_id",
        reference="case__reference",
        expected_hash=lambda row: event_hash(
            **{name: row[name] for name in HASHED_FIELDS}, prev_hash=row["prev_hash"]
        ),
        batch_size=batch_size,
        progress=progress,
    )


def verify_account_chains(
    *, batch_size: int = 2000, progress: Progress | None = None
) -> VerifyResult:
    """Walk every account's chain of account events; ``cases`` counts the accounts, and a
    broken link names the account's reference."""
    from cases.models import AccountEvent

    columns = ("id", "account__reference", "prev_hash", "hash", *ACCOUNT_HASHED_FIELDS)
    return _walk(
        _chain_rows(AccountEvent.objects.all(), batch_size, group="account_id", columns=columns),
        group="account_id",
        reference="account__reference",
        expected_hash=lambda row: account_event_hash(
            **{name: row[name] for name in ACCOUNT_HASHED_FIELDS}, prev_hash=row["prev_hash"]
        ),
        batch_size=batch_size,
        progress=progress,
    )
