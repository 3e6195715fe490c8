"""The attempts' identity guard runs only for an update that changes the identity.

0021's trigger called its function for every update of an attempt, and the function's first
step compared the identity columns and let the update pass. Every apply updates its attempt
three times (the send's mark, the answer's renewal, the finish), each through that function:
on the bench's database, ``EXPLAIN ANALYZE`` of a renewal put the trigger at 0.027 ms of its
0.062–0.085 ms. The comparison is now the trigger's own ``WHEN`` condition, which PostgreSQL
evaluates without calling the function: an update that keeps the identity runs no function;
one that changes it runs the same function as before, which refuses it (or lets the owner's
maintenance through). Deletes keep a row trigger of their own (``attempt_no_delete``);
truncates keep 0021's statement trigger.

Non-atomic, as 0021: each ``CREATE TRIGGER`` holds its SHARE ROW EXCLUSIVE lock for its own
statement only. PostgreSQL only: SQLite has the models' guards (``cases.append_only``).
"""

from importlib import import_module

from django.db import migrations

_0021 = import_module("cases.migrations.0021_append_only_attempts")

IDENTITY_CHANGED = f"{_0021._row('OLD')} IS DISTINCT FROM {_0021._row('NEW')}"

FORWARD = [
    "DROP TRIGGER IF EXISTS attempt_identity_fixed ON cases_attempt",
    "CREATE TRIGGER attempt_identity_fixed BEFORE UPDATE ON cases_attempt FOR EACH ROW "
    f"WHEN ({IDENTITY_CHANGED}) EXECUTE FUNCTION holdfast_attempt_identity_fixed()",
    "DROP TRIGGER IF EXISTS attempt_no_delete ON cases_attempt",
    "CREATE TRIGGER attempt_no_delete BEFORE DELETE ON cases_attempt FOR EACH ROW "
    "EXECUTE FUNCTION holdfast_attempt_identity_fixed()",
]

BACKWARD = [
    "DROP TRIGGER IF EXISTS attempt_no_delete ON cases_attempt",
    *_0021.ATTEMPT_TRIGGERS[:2],
]


def _run(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("cases", "0036_attempt_pages_keep_room_for_renewals")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD))]
