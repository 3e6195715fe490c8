"""Indexes for the case list's full-text search (``cases.fulltext``).

The note and the reason a case waits, and every event's reason (the timeline), are searched by
their words (``to_tsvector('english', …)``, GIN) and by any part of a word (``UPPER(col)
gin_trgm_ops``; the events' reason has 0015's). Without them a search of the timeline read
every event.

On PostgreSQL the indexes are built ``CONCURRENTLY`` in this non-atomic migration, so the desk
keeps writing while they build (``tests/support/migration_lint.py``). Other databases (SQLite)
have neither GIN nor full-text vectors: there the operations change only the migration state.
"""

from __future__ import annotations

from importlib import import_module

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import migrations

# 0013's operation (``CREATE INDEX CONCURRENTLY`` on PostgreSQL, state only elsewhere) and its
# trigram index: a migration's code never changes once applied, so borrowing it is safe.
_0013 = import_module("cases.migrations.0013_list_page_indexes")


def _words(field: str, name: str) -> GinIndex:
    return GinIndex(SearchVector(field, config="english"), name=name)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("cases", "0028_saved_views"),
    ]

    operations = [
        _0013.AddIndexConcurrently(model_name="case", index=_words("note", "case_note_fts")),
        _0013.AddIndexConcurrently(
            model_name="case", index=_0013._trigram("note", "case_note_trgm")
        ),
        _0013.AddIndexConcurrently(
            model_name="case", index=_words("waiting_reason", "case_reason_fts")
        ),
        _0013.AddIndexConcurrently(
            model_name="case", index=_0013._trigram("waiting_reason", "case_reason_trgm")
        ),
        _0013.AddIndexConcurrently(
            model_name="caseevent", index=_words("reason", "event_reason_fts")
        ),
    ]
