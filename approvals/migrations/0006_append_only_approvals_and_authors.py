"""Approvals and proposal authors are append-only, whoever connects (``cases.append_only``).

- ``approvals_proposalauthor``: never updated or deleted (``holdfast_guard_rows()`` from
  ``cases`` 0021, with no mutable column).
- ``approvals_approval``: a decision is never rewritten or deleted; only its revocation
  (``revoked_at``, ``revoked_reason``) is written later, from empty to set, once
  (``holdfast_approval_revoke_once()``): a second revocation, or a revocation that leaves
  ``revoked_at`` empty, is refused.

The owner's repair passes as for the audit events (``holdfast.maintenance`` set by a role that
can act as the table's owner). Non-atomic: each ``CREATE TRIGGER`` holds its lock for its own
statement only. SQLite has the models' guards, no triggers.
"""

from django.db import migrations

REVOKE_ONCE = """
CREATE OR REPLACE FUNCTION holdfast_approval_revoke_once() RETURNS trigger
  LANGUAGE plpgsql
  SET search_path = pg_catalog
AS $$
DECLARE
  table_owner oid;
  revocation text[] := '{revoked_at,revoked_reason}';
  why text;
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF (to_jsonb(NEW) - revocation) IS DISTINCT FROM (to_jsonb(OLD) - revocation) THEN
      why := 'a decided approval never changes, only its revocation is written';
    ELSIF NEW.revoked_at IS NOT DISTINCT FROM OLD.revoked_at
          AND NEW.revoked_reason IS NOT DISTINCT FROM OLD.revoked_reason THEN
      RETURN NEW;  -- nothing changed
    ELSIF OLD.revoked_at IS NOT NULL THEN
      why := 'the approval is already revoked';
    ELSIF NEW.revoked_at IS NULL THEN
      why := 'a revocation sets revoked_at';
    ELSE
      RETURN NEW;  -- revoked now, once
    END IF;
  END IF;
  SELECT relowner INTO table_owner FROM pg_catalog.pg_class WHERE oid = TG_RELID;
  IF coalesce(pg_catalog.current_setting('holdfast.maintenance', true), '') = 'on'
     AND pg_catalog.pg_has_role(current_user, table_owner, 'MEMBER') THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    IF TG_OP = 'TRUNCATE' THEN RETURN NULL; END IF;
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'approvals_approval is append-only: % refused for role % (%)',
    TG_OP, current_user, coalesce(why, 'decisions are kept')
    USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""

CREATE = [
    REVOKE_ONCE,
    "DROP TRIGGER IF EXISTS approval_revoke_once ON approvals_approval",
    "CREATE TRIGGER approval_revoke_once BEFORE UPDATE OR DELETE ON approvals_approval "
    "FOR EACH ROW EXECUTE FUNCTION holdfast_approval_revoke_once()",
    "DROP TRIGGER IF EXISTS approval_no_truncate ON approvals_approval",
    "CREATE TRIGGER approval_no_truncate BEFORE TRUNCATE ON approvals_approval "
    "FOR EACH STATEMENT EXECUTE FUNCTION holdfast_approval_revoke_once()",
    "DROP TRIGGER IF EXISTS proposalauthor_append_only ON approvals_proposalauthor",
    "CREATE TRIGGER proposalauthor_append_only BEFORE UPDATE OR DELETE "
    "ON approvals_proposalauthor FOR EACH ROW EXECUTE FUNCTION holdfast_guard_rows()",
    "DROP TRIGGER IF EXISTS proposalauthor_no_truncate ON approvals_proposalauthor",
    "CREATE TRIGGER proposalauthor_no_truncate BEFORE TRUNCATE ON approvals_proposalauthor "
    "FOR EACH STATEMENT EXECUTE FUNCTION holdfast_guard_rows()",
]

DROP = [
    "DROP TRIGGER IF EXISTS approval_revoke_once ON approvals_approval",
    "DROP TRIGGER IF EXISTS approval_no_truncate ON approvals_approval",
    "DROP TRIGGER IF EXISTS proposalauthor_append_only ON approvals_proposalauthor",
    "DROP TRIGGER IF EXISTS proposalauthor_no_truncate ON approvals_proposalauthor",
    "DROP FUNCTION IF EXISTS holdfast_approval_revoke_once()",
]


def create_guards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in CREATE:
            schema_editor.execute(statement, params=None)


def drop_guards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in DROP:
            schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("approvals", "0005_proposal_authors"),
        ("cases", "0021_append_only_attempts"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="approval",
            options={"base_manager_name": "objects", "ordering": ["-decided_at"]},
        ),
        migrations.AlterModelOptions(
            name="proposalauthor",
            options={"base_manager_name": "objects", "ordering": ["proposal", "pk"]},
        ),
        migrations.RunPython(create_guards, drop_guards),
    ]
