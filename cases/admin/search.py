"""The list pages' search, answered by each field's own index.

The admin's search ORs one ``icontains`` per search field in one ``WHERE`` over the joined
tables (``case.reference LIKE … OR account.reference LIKE …``): PostgreSQL can use no index for
an OR that spans two tables, and reads every case. :class:`IndexedSearchMixin` asks the same
question field by field, ``pk IN (SELECT pk … WHERE field LIKE … UNION …)``, so each field's
trigram index answers its part (``cases`` migrations 0012 and 0013) and the union is as small
as the matches. The same words find the same rows as the admin's own search: each word
(``smart_split``, quotes allowed) must match one of the fields, case-insensitively.

The index is asked for the word's longest run of letters or digits: ``ORD-1005000`` asks the
trigram index for ``1005000``, whose trigrams few rows share, not for ``ORD``'s, which every
order id has (a scan of the whole posting list of every case); the whole word is then checked
on those rows, through an expression no index matches (so the planner does not hand it to the
index too). A run of fewer than three characters gives no trigram: then the whole word alone.

A word's matches are read once, field by field (one small query each: a ``UNION ALL`` of them
would be planned in parallel on a big table, and starting the workers costs more than the
lookups) and, when there are at most :data:`RESOLVED_MATCHES`, the page filters on those
primary keys: its count and its rows then cost primary-key lookups instead of two more trigram
scans each. A word that matches more keeps the subquery. Either way a search costs the same
number of queries however many cases there are.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Q, QuerySet, Value
from django.db.models.functions import Concat
from django.http import HttpRequest
from django.utils.text import smart_split, unescape_string_literal

RESOLVED_MATCHES = 500
_RUN = re.compile(r"[^\W_]{3,}")


def _contains(field: str, unindexed: str, word: str) -> Q:
    """``field`` contains ``word`` (``icontains``), asking the index for the word's longest run
    of letters or digits and checking the whole word on ``unindexed`` (the field's text as an
    expression no index matches)."""
    runs = _RUN.findall(word)
    key = max(reversed(runs), key=len) if runs else ""
    if not key or key == word:
        return Q(**{f"{field}__icontains": word})
    return Q(**{f"{field}__icontains": key}) & Q(**{f"{unindexed}__icontains": word})


class IndexedSearchMixin:
    """``get_search_results`` for search fields that are plain ``icontains`` lookups."""

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        fields = list(self.get_search_fields(request))  # type: ignore[attr-defined]
        if not search_term or not fields or any(f[0] in "^=@" for f in fields):
            return super().get_search_results(request, queryset, search_term)  # type: ignore[misc]
        rows = queryset.model._default_manager
        for bit in smart_split(search_term):
            if bit.startswith(('"', "'")) and bit[0] == bit[-1]:
                bit = unescape_string_literal(bit)
            parts = [
                # ``CONCAT(field, '')``: the same text, not the indexed ``UPPER(field)``.
                rows.alias(hf_unindexed=Concat(field, Value("")))
                .filter(_contains(field, "hf_unindexed", bit))
                .order_by()
                .values("pk")
                for field in fields
            ]
            found: list[Any] = []
            for part in parts:
                if len(found) <= RESOLVED_MATCHES:
                    wanted = RESOLVED_MATCHES + 1 - len(found)
                    found.extend(part.values_list("pk", flat=True)[:wanted])
            if len(found) <= RESOLVED_MATCHES:
                queryset = queryset.filter(pk__in=sorted(set(found)))
            else:
                queryset = queryset.filter(pk__in=parts[0].union(*parts[1:]))
        return queryset, False
