"""Global monotonic counters: case numbers, approval numbers and fencing tokens.

Fencing tokens come from a PostgreSQL sequence (never rolled back, never reused, no row lock)
or, on SQLite, from a counter row whose update is serialised by the IMMEDIATE transaction.
Case numbers use a counter row on both so that they stay gap-free in the common case.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import F

from cases.models import CounterRow

FENCING_SEQUENCE = "holdfast_fencing_token"


def counter_next(name: str) -> int:
    """Increment and return the named counter. Inside a caller's transaction the row stays
    locked until it commits, so concurrent callers are strictly ordered."""
    with transaction.atomic():
        CounterRow.objects.get_or_create(name=name)
        CounterRow.objects.filter(name=name).update(value=F("value") + 1)
        return CounterRow.objects.values_list("value", flat=True).get(name=name)


def counter_raise_to(name: str, minimum: int) -> None:
    """Make sure the next value of the counter is above ``minimum``."""
    with transaction.atomic():
        CounterRow.objects.get_or_create(name=name)
        CounterRow.objects.filter(name=name, value__lt=minimum).update(value=minimum)


def next_fencing_token() -> int:
    """A fencing token higher than every token handed out before, database-wide. The one
    writer of the tokens: on PostgreSQL the claim takes its token in its own read, with the
    expression :func:`next_fencing_token_sql` gives (one round trip less on the hot path)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {next_fencing_token_sql()}")  # noqa: S608 - a fixed identifier
            return int(cursor.fetchone()[0])
    return counter_next("fencing_token")


def next_fencing_token_sql() -> str:
    """PostgreSQL: the SQL expression that takes the next fencing token from the sequence, for a
    statement that reads its token with other values (the claim's read). Nothing else names
    the sequence's ``nextval``."""
    return f"nextval('{FENCING_SEQUENCE}')"


def fencing_current() -> int:
    """The highest fencing token handed out so far (0 before the first), consuming none."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT last_value, is_called FROM {FENCING_SEQUENCE}")  # noqa: S608
            last_value, is_called = cursor.fetchone()
            return int(last_value) if is_called else int(last_value) - 1
    row = CounterRow.objects.filter(name="fencing_token").values_list("value", flat=True)
    return row.first() or 0


def fencing_raise_to(minimum: int) -> None:
    """Make every later fencing token greater than ``minimum`` (never lowers the sequence)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # setval to the greater of both: a concurrent nextval is never moved backwards.
            sql = f"SELECT setval(%s, GREATEST(%s, (SELECT last_value FROM {FENCING_SEQUENCE})))"  # noqa: S608, E501 - a fixed identifier
            cursor.execute(sql, [FENCING_SEQUENCE, minimum])
        return
    counter_raise_to("fencing_token", minimum)
