"""A hash chain over each case's events, and an append-only trigger the application cannot open.

The chain: every event gets ``prev_hash`` and ``hash`` (``cases/audit.py``); the events that
exist are linked here, per case in id order.

The trigger (PostgreSQL): before this migration any session could ``SET holdfast.maintenance
= 'on'`` and rewrite events. Now UPDATE, DELETE and TRUNCATE pass only when the session's
``current_user`` can act as the role that owns ``cases_caseevent`` (the role migrations run
as; a superuser can) *and* has set the switch for the session or the transaction. The
application connects as another role, which has only INSERT and SELECT on the table (README,
"Database roles and the audit log"), and even a role granted UPDATE is refused.
"""

from django.db import migrations, models

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

BATCH = 2000


def _maintenance(schema_editor, on: bool) -> None:
    """The owner's deliberate bypass, for this transaction only."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "SELECT set_config('holdfast.maintenance', %s, true)", ["on" if on else "off"]
        )


def link_existing_events(apps, schema_editor):
    from cases.audit import stored_hash

    CaseEvent = apps.get_model("cases", "CaseEvent")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY_OWNER, params=None)
    _maintenance(schema_editor, True)
    last = (0, 0)
    previous: dict[str, object] = {"case_id": None, "hash": ""}
    while True:
        batch = list(
            CaseEvent.objects.filter(case_id__gte=last[0])
            .filter(models.Q(case_id__gt=last[0]) | models.Q(id__gt=last[1]))
            .order_by("case_id", "id")[:BATCH]
        )
        for event in batch:
            prev_hash = previous["hash"] if previous["case_id"] == event.case_id else ""
            digest = stored_hash(event, prev_hash=prev_hash)
            CaseEvent.objects.filter(pk=event.pk).update(prev_hash=prev_hash, hash=digest)
            previous = {"case_id": event.case_id, "hash": digest}
        if len(batch) < BATCH:
            break
        last = (batch[-1].case_id, batch[-1].id)
    _maintenance(schema_editor, False)


def restore_switch(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY_SWITCH, params=None)


class Migration(migrations.Migration):
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
        migrations.AddIndex(
            model_name="caseevent",
            index=models.Index(fields=["case", "id"], name="cases_event_chain_idx"),
        ),
        migrations.RunPython(link_existing_events, restore_switch),
    ]
