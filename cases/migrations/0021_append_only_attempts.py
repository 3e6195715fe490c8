"""Apply attempts keep their identity and are never deleted, whoever connects.

``holdfast_guard_rows()`` is the generic trigger function for rows the application adds but
never rewrites (``cases/append_only.py``): an UPDATE passes when it changes only the columns named
as the trigger's arguments (none: nothing may change); DELETE and TRUNCATE never pass. The
one way past it is the one the audit events have (0010): a session whose ``current_user`` can
act as the table's owner and has set ``holdfast.maintenance = 'on'``. ``approvals`` 0006 uses
the same function for approvals and proposal authors.

On ``cases_attempt`` the state, lease, heartbeat and confirmed steps may change; the identity
(case, operation, reference, sequence, fencing token, claim time, worker, who started it,
kind) never does. The application role gets ``UPDATE`` on exactly the others (README,
"Database roles"). Every heartbeat and state change of an apply passes this trigger, so it has
its own function comparing the identity columns as one row: measured in one transaction of
10k single-row updates, about 20 us more per update, against about 70 us for the generic
function's ``to_jsonb`` comparison of the whole row (and about 25 us for the update itself).

Non-atomic: each ``CREATE TRIGGER`` holds its SHARE ROW EXCLUSIVE lock for its own statement
only. SQLite has the models' guards (``cases.append_only``), no triggers: the test suite
empties its tables with ``DELETE``.
"""

from django.db import migrations

# One function body, two fast paths: the generic function compares the rows without the columns
# named as the trigger's arguments; the attempts' compares their identity columns as one row.
FUNCTION = """
CREATE OR REPLACE FUNCTION FUNCTION_NAME() RETURNS trigger
  LANGUAGE plpgsql
  SET search_path = pg_catalog
AS $$
DECLARE
  table_owner oid;
  mutable text[] := MUTABLE_COLUMNS;
  fixed text;
BEGIN
  IF TG_OP = 'UPDATE' THEN
    -- The common case first, and cheapest: nothing but the mutable columns changed.
    IF UNCHANGED THEN
      RETURN NEW;
    END IF;
    SELECT string_agg(n.key, ', ' ORDER BY n.key) INTO fixed
      FROM jsonb_each(to_jsonb(NEW) - mutable) n
      WHERE n.value IS DISTINCT FROM (to_jsonb(OLD) -> n.key);
  END IF;
  SELECT relowner INTO table_owner FROM pg_catalog.pg_class WHERE oid = TG_RELID;
  IF coalesce(pg_catalog.current_setting('holdfast.maintenance', true), '') = 'on'
     AND pg_catalog.pg_has_role(current_user, table_owner, 'MEMBER') THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    IF TG_OP = 'TRUNCATE' THEN RETURN NULL; END IF;
    RETURN NEW;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION '% is append-only: UPDATE of % refused for role %',
      TG_TABLE_NAME, fixed, current_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RAISE EXCEPTION '% is append-only: % refused for role %', TG_TABLE_NAME, TG_OP, current_user
    USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""

GUARD_FUNCTION = (
    FUNCTION.replace("FUNCTION_NAME", "holdfast_guard_rows")
    .replace("MUTABLE_COLUMNS", "coalesce(TG_ARGV::text[], '{}')")
    .replace("UNCHANGED", "(to_jsonb(NEW) - mutable) = (to_jsonb(OLD) - mutable)")
)

IDENTITY = (
    "id",
    "case_id",
    "operation_id",
    "reference",
    "sequence",
    "kind",
    "worker",
    "started_by_id",
    "fencing_token",
    "claimed_at",
)
MUTABLE = (
    "state",
    "lease_expires_at",
    "heartbeat_at",
    "last_confirmed_step",
    "submitted_at",
    "last_error",
    "cancel_requested_at",
    "finished_at",
)


def _row(prefix: str) -> str:
    return "(" + ", ".join(f"{prefix}.{column}" for column in IDENTITY) + ")"


ATTEMPT_FUNCTION = (
    FUNCTION.replace("FUNCTION_NAME", "holdfast_attempt_identity_fixed")
    .replace("MUTABLE_COLUMNS", "'{" + ",".join(MUTABLE) + "}'")
    .replace("UNCHANGED", f"{_row('NEW')} IS NOT DISTINCT FROM {_row('OLD')}")
)

ATTEMPT_TRIGGERS = [
    "DROP TRIGGER IF EXISTS attempt_identity_fixed ON cases_attempt",
    "CREATE TRIGGER attempt_identity_fixed BEFORE UPDATE OR DELETE ON cases_attempt "
    "FOR EACH ROW EXECUTE FUNCTION holdfast_attempt_identity_fixed()",
    "DROP TRIGGER IF EXISTS attempt_no_truncate ON cases_attempt",
    "CREATE TRIGGER attempt_no_truncate BEFORE TRUNCATE ON cases_attempt "
    "FOR EACH STATEMENT EXECUTE FUNCTION holdfast_attempt_identity_fixed()",
]

DROP = [
    "DROP TRIGGER IF EXISTS attempt_identity_fixed ON cases_attempt",
    "DROP TRIGGER IF EXISTS attempt_no_truncate ON cases_attempt",
    "DROP FUNCTION IF EXISTS holdfast_attempt_identity_fixed()",
    "DROP FUNCTION IF EXISTS holdfast_guard_rows()",
]


def create_guards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(GUARD_FUNCTION, params=None)
    schema_editor.execute(ATTEMPT_FUNCTION, params=None)
    for statement in ATTEMPT_TRIGGERS:
        schema_editor.execute(statement, params=None)


def drop_guards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in DROP:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("cases", "0020_follow_up_policy_permissions")]

    operations = [
        migrations.AlterModelOptions(
            name="attempt",
            options={"base_manager_name": "objects", "ordering": ["case", "sequence"]},
        ),
        migrations.RunPython(create_guards, drop_guards),
    ]
