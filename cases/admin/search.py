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
scans each. A word that matches more is checked, as the admin's own search would, on the rows
the other words left when one of them left at most that many, and otherwise keeps the subquery.
Either way a search costs the same number of queries however many cases there are.
"""

from __future__ import annotations

import functools
import operator
import re
from typing import Any

from django.db.models import Q, QuerySet, TextField, Value
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


def _unindexed(field: str) -> Concat:
    """``CONCAT(field, '')``: the field's text, but not the indexed ``UPPER(field)``; as text,
    which a character field's and a text field's concatenation both are."""
    return Concat(field, Value(""), output_field=TextField())


class IndexedSearchMixin:
    """``get_search_results`` for search fields that are plain ``icontains`` lookups."""

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        fields = list(self.get_search_fields(request))  # type: ignore[attr-defined]
        if not search_term or not fields or any(f[0] in "^=@" for f in fields):
            return super().get_search_results(request, queryset, search_term)  # type: ignore[misc]
        rows = queryset.model._default_manager
        narrowed = False
        broad: list[tuple[str, list[QuerySet[Any]]]] = []
        for bit in _words(search_term):
            if narrowed:  # checked on the few rows left (below): no index needs asking
                broad.append((bit, []))
                continue
            found, parts = _look_up(rows, fields, bit)
            if len(found) <= RESOLVED_MATCHES:
                queryset = queryset.filter(pk__in=sorted(found))
                narrowed = True
            else:
                broad.append((bit, parts))
        if not broad:
            return queryset, False
        if not narrowed:  # every word matches many rows: the first keeps its subquery
            _, parts = broad.pop(0)
            queryset = queryset.filter(pk__in=parts[0].union(*parts[1:]))
        return _checked(queryset, fields, [bit for bit, _ in broad]), False


def _words(search_term: str) -> list[str]:
    """The search's words, as the admin splits them (quoted phrases kept whole), those with a
    digit first: references and order ids, which few rows share."""
    words = [
        unescape_string_literal(bit) if bit[0] in "\"'" and bit[0] == bit[-1] else bit
        for bit in smart_split(search_term)
    ]
    words.sort(key=lambda word: not any(c.isdigit() for c in word))
    return words


def _look_up(rows: Any, fields: list[str], bit: str) -> tuple[set[Any], list[QuerySet[Any]]]:
    """The rows whose ``fields`` contain ``bit``, each field asked through its index, read
    only while they are few (up to ``RESOLVED_MATCHES`` + 1), and the per-field subqueries."""
    parts = [
        rows.alias(hf_unindexed=_unindexed(field))
        .filter(_contains(field, "hf_unindexed", bit))
        .order_by()
        .values("pk")
        for field in fields
    ]
    found: set[Any] = set()  # the rows, once each however many fields match
    for part in parts:
        if len(found) <= RESOLVED_MATCHES:
            wanted = RESOLVED_MATCHES + 1 - len(found)
            found.update(part.exclude(pk__in=found).values_list("pk", flat=True)[:wanted])
    return found, parts


def _checked(queryset: QuerySet[Any], fields: list[str], bits: list[str]) -> QuerySet[Any]:
    """The other words are checked, as the admin's own search would, on the rows left (a
    search of "Customer 777" looked "Customer" up in all 100k accounts)."""
    checks = {f"hf_check_{i}": _unindexed(field) for i, field in enumerate(fields)}
    queryset = queryset.alias(**checks)
    for bit in bits:
        matches = (Q(**{f"{name}__icontains": bit}) for name in checks)
        queryset = queryset.filter(functools.reduce(operator.or_, matches))
    return queryset
