"""A hash chain over each case's events, and an append-only trigger the application cannot open.

The chain: every event gets ``prev_hash`` and ``hash`` (``cases/audit.py``); the events that
exist are linked here, per case in id order.

The trigger (PostgreSQL): before this migration any session could ``SET holdfast.maintenance
= 'on'`` and rewrite events. Now UPDATE, DELETE and TRUNCATE pass only when the session's
``current_user`` can act as the role that owns ``cases_caseevent`` (the role migrations run
as; a superuser can) *and* has set the switch for the session or the transaction. The
application connects as another role, which has only INSERT and SELECT on the table (README,
"Database roles and the audit log"), and even a role granted UPDATE is refused.

Locks: the migration is not atomic, so no lock outlives its own statement. Adding the two
columns takes ACCESS EXCLUSIVE for an instant (a constant default: no rewrite); the chain's
index is built ``CONCURRENTLY`` (SHARE UPDATE EXCLUSIVE: writes go on); the backfill links
``CASES_PER_BATCH`` cases per transaction, holding only the row locks of those cases (taken
first, as every writer of events takes its case's lock) and the events it rewrites. So the
desk keeps writing while the events are linked: a case in the batch being linked waits for
that batch; an event appended meanwhile to a case not linked yet is linked with it, in order
(``tests/cases/test_audit_chain.py`` measures the lock on a running migration). It was one
transaction that held ACCESS EXCLUSIVE on the events from the first ALTER to the last link.
"""

from django.contrib.postgres.operations import AddIndexConcurrently as PostgresConcurrently
from django.db import migrations, models, transaction

APPEND_ONLY_OWNER = """
CREATE OR REPLACE FUNCTION holdfast_caseevent_append_only() RETURNS trigger
  LANGUAGE plpgsql
  SET search_path = pg_catalog
AS $$
DECLARE
  table_owner oid;
BEGIN
  SELECT relowner INTO table_owner FROM pg_catalog.pg_class WHERE oid = TG_RELID;
  IF coalesce(pg_catalog.current_setting('holdfast.maintenance', true), '') = 'on'
     AND pg_catalog.pg_has_role(current_user, table_owner, 'MEMBER') THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    IF TG_OP = 'TRUNCATE' THEN RETURN NULL; END IF;
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'cases_caseevent is append-only: % refused for role %', TG_OP, current_user
    USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""

# 0007's function, restored when this migration is reversed.
APPEND_ONLY_SWITCH = """
CREATE OR REPLACE FUNCTION holdfast_caseevent_append_only() RETURNS trigger AS $$
BEGIN
  IF coalesce(current_setting('holdfast.maintenance', true), '') = 'on' THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    IF TG_OP = 'TRUNCATE' THEN RETURN NULL; END IF;
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'cases_caseevent is append-only: % refused', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""

CASES_PER_BATCH = 500


class AddIndexConcurrently(PostgresConcurrently):
    """``CREATE INDEX CONCURRENTLY`` on PostgreSQL; a plain index elsewhere (SQLite)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            model = to_state.apps.get_model(app_label, self.model_name)
            schema_editor.add_index(model, self.index)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            model = from_state.apps.get_model(app_label, self.model_name)
            schema_editor.remove_index(model, self.index)


def _maintenance(schema_editor, on: bool) -> None:
    """The owner's deliberate bypass, for this transaction only."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "SELECT set_config('holdfast.maintenance', %s, true)", ["on" if on else "off"]
        )


def _link_cases(CaseEvent, Case, schema_editor, case_ids) -> None:
    """Link the events of ``case_ids``, each case's in id order, in one transaction under
    those cases' row locks."""
    from cases.audit import stored_hash

    with transaction.atomic(using=schema_editor.connection.alias):
        _maintenance(schema_editor, True)
        list(Case.objects.select_for_update().filter(pk__in=case_ids).values_list("pk"))
        previous: dict[str, object] = {"case_id": None, "hash": ""}
        for event in CaseEvent.objects.filter(case_id__in=case_ids).order_by("case_id", "id"):
            prev_hash = previous["hash"] if previous["case_id"] == event.case_id else ""
            digest = stored_hash(event, prev_hash=prev_hash)
            if (event.prev_hash, event.hash) != (prev_hash, digest):
                CaseEvent.objects.filter(pk=event.pk).update(prev_hash=prev_hash, hash=digest)
            previous = {"case_id": event.case_id, "hash": digest}
        _maintenance(schema_editor, False)


def link_existing_events(apps, schema_editor):
    CaseEvent = apps.get_model("cases", "CaseEvent")
    Case = apps.get_model("cases", "Case")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY_OWNER, params=None)
    last = 0
    while True:
        case_ids = list(
            CaseEvent.objects.filter(case_id__gt=last)
            .order_by("case_id")
            .values_list("case_id", flat=True)
            .distinct()[:CASES_PER_BATCH]
        )
        if not case_ids:
            break
        _link_cases(CaseEvent, Case, schema_editor, case_ids)
        last = case_ids[-1]


def restore_switch(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY_SWITCH, params=None)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("cases", "0009_queues")]

    operations = [
        migrations.AddField(
            model_name="caseevent",
            name="prev_hash",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="caseevent",
            name="hash",
            field=models.CharField(default="", editable=False, max_length=64),
            preserve_default=False,
        ),
        AddIndexConcurrently(
            model_name="caseevent",
            index=models.Index(fields=["case", "id"], name="cases_event_chain_idx"),
        ),
        migrations.RunPython(link_existing_events, restore_switch),
    ]
