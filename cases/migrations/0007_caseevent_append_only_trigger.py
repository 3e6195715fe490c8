"""On PostgreSQL the event table refuses UPDATE, DELETE and TRUNCATE from the application.

The ORM already refuses them; the trigger makes raw SQL refuse them too. A DBA (or a test
database being flushed) opts in per session with ``SET holdfast.maintenance = 'on'``.
"""

from django.db import migrations

CREATE = """
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
CREATE TRIGGER caseevent_append_only_rows BEFORE UPDATE OR DELETE ON cases_caseevent
  FOR EACH ROW EXECUTE FUNCTION holdfast_caseevent_append_only();
CREATE TRIGGER caseevent_append_only_truncate BEFORE TRUNCATE ON cases_caseevent
  FOR EACH STATEMENT EXECUTE FUNCTION holdfast_caseevent_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS caseevent_append_only_rows ON cases_caseevent;
DROP TRIGGER IF EXISTS caseevent_append_only_truncate ON cases_caseevent;
DROP FUNCTION IF EXISTS holdfast_caseevent_append_only();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("cases", "0006_revocation_retention_restore")]

    operations = [migrations.RunPython(forwards, backwards)]
