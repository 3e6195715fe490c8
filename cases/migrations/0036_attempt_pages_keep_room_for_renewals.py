"""The attempts' table keeps room on each page for the new row versions of its renewals, so
that a renewal (which names no indexed column since 0035) is a HOT update: PostgreSQL writes
the new version on the same page and no index entry. A page filled to the brim by inserts
left no room, and the new version went to another page, with an entry in every index.

Its own migration, and no schema change beside it: ``ALTER TABLE … SET (fillfactor)`` takes
a lock that lets reads and writes go on, and changes only how later inserts fill pages.
"""

from django.db import migrations

FILLFACTOR = 85  # of each page filled by inserts; the rest for renewals' row versions


def _fillfactor(value: int | None):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return  # SQLite rewrites a row in place: nothing to keep room for
        table = schema_editor.quote_name(apps.get_model("cases", "Attempt")._meta.db_table)
        if value is None:
            schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")
        else:
            schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {int(value)})")

    return run


class Migration(migrations.Migration):
    dependencies = [("cases", "0035_attempt_renewals_rewrite_no_index")]

    operations = [migrations.RunPython(_fillfactor(FILLFACTOR), _fillfactor(None))]
