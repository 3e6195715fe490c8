"""The audit hash as PostgreSQL computes it (``cases.audit.hash_sql``), byte for byte Python's.

The one-statement claim writes its event with a hash the server computes from what the same
statement read: a single character escaped differently would break the case's chain at that
event. Any text (quotes, backslashes, control characters, every plane of Unicode), any integer
or NULL, through the same canonical document Python hashes.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cases.audit import Sql, canonical, canonical_sql, canonical_timestamp, event_hash, hash_sql

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the server's hash: PostgreSQL's own"
    ),
]

# PostgreSQL's text holds any character but NUL (and no lone surrogate, which UTF-8 cannot
# encode either).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
WHEN = st.datetimes(
    min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(9999, 1, 1), timezones=st.just(dt.UTC)
)

_DETAIL_KEYS = ("attempt", "fencing_token", "worker", "approval", "lease_expires_at", "ü", "a b")


def _document() -> dict[str, Sql]:
    detail = {
        key: Sql("int" if key == "fencing_token" else "text", f"%(d{index})s")
        for index, key in enumerate(_DETAIL_KEYS)
    }
    return {
        "action": Sql("text", "%(action)s"),
        "actor_id": Sql("int", "%(actor_id)s"),
        "actor_label": Sql("text", "%(actor_label)s"),
        "case_id": Sql("int", "%(case_id)s"),
        "created_at": Sql("text", "%(created_at)s"),
        "detail": Sql("object", fields=detail),
        "from_status": Sql("text", "%(from_status)s"),
        "reason": Sql("text", "%(reason)s"),
        "to_status": Sql("text", "%(to_status)s"),
        "version": Sql("int", "%(version)s"),
    }


def _server(sql: str, params: dict) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        return cursor.fetchone()[0]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.tuples(*[TEXT] * 5),
    ints=st.tuples(st.none() | INT, INT, INT),
    detail_texts=st.lists(st.none() | TEXT, min_size=6, max_size=6),
    token=st.none() | INT,
    when=WHEN,
    prev=TEXT,
)
def test_the_server_hashes_what_python_hashes(texts, ints, detail_texts, token, when, prev):
    action, actor_label, from_status, reason, to_status = texts
    actor_id, case_id, version = ints
    detail_values = [*detail_texts[:1], token, *detail_texts[1:]]
    detail = dict(zip(_DETAIL_KEYS, detail_values, strict=True))
    fields = {
        "case_id": case_id,
        "action": action,
        "from_status": from_status,
        "to_status": to_status,
        "reason": reason,
        "actor_id": actor_id,
        "actor_label": actor_label,
        "version": version,
        "detail": detail,
        "created_at": when,
    }
    params = {
        **{key: value for key, value in fields.items() if key not in {"detail", "created_at"}},
        "created_at": canonical_timestamp(when),
        **{f"d{index}": value for index, value in enumerate(detail_values)},
        "prev": prev,
    }
    document = _document()

    whole = {**document, "prev_hash": Sql("text", "%(prev)s")}
    assert _server(canonical_sql(whole), params) == canonical(**fields, prev_hash=prev).decode()
    assert _server(hash_sql(document, "%(prev)s"), params) == event_hash(**fields, prev_hash=prev)


def test_the_keys_are_in_pythons_order_not_jsonbs():
    """jsonb orders keys by length first; the canonical document by code point."""
    document = {"bb": Sql("int", "1"), "a": Sql("int", "2"), "é": Sql("int", "3")}
    assert _server(canonical_sql(document), {}) == '{"a":2,"bb":1,"é":3}'
