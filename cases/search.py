"""The list pages' search (admin and API), answered by each field's own index, bounded by design.

The admin's search ORs one ``icontains`` per search field in one ``WHERE`` over the joined
tables (``case.reference LIKE … OR account.reference LIKE …``): PostgreSQL can use no index for
an OR that spans two tables, and reads every case. :func:`indexed_search` asks the question
field by field, each field through its own trigram index (``cases`` migrations 0012 and 0013),
and each word comes back as a capped set of primary keys. The same words find the same rows as
the admin's own search whenever one word matches at most :data:`RESOLVED_MATCHES` rows: each
word (``smart_split``, quotes allowed) must match one of the fields, case-insensitively.

The index is asked for the word's longest run of letters or digits: ``ORD-1005000`` asks the
trigram index for ``1005000``, whose trigrams few rows share, not for ``ORD``'s, which every
order id has; the whole word is then checked on the first :data:`RESOLVED_MATCHES` + 1 rows
the index gives, through an expression no index matches (so the planner does not hand it to the
index too). When the index gives more, the word's answer is not complete, whatever it found. A
run of fewer than three characters gives no trigram: then the whole word alone.

A field of a related row (``account__name``) is asked in two steps, never through a join left
to the planner: the related table's index gives at most :data:`RESOLVED_MATCHES` + 1 of its
rows, then the rows that point at them (the foreign key's index, one related row after another
until the cap), capped the same way; when either step was capped, the word's answer is not
complete. A join of the cases to every account named "Customer" was what read every case.

**Bounded by design.** Each word costs one capped read per field (two for a related field)
and reads at most :data:`RESOLVED_MATCHES` + 1 rows per field, whatever the table size.
Every word's reads go in one statement, so a search is one query however many rows its words
match. The page then filters on the smallest complete set of keys (a word that matched at most
:data:`RESOLVED_MATCHES` rows) and checks the other words on those rows only (primary-key
lookups). When every word matches more than that, no index can answer the search without
reading the matches of every word: the page shows the matches among the first
:data:`RESOLVED_MATCHES` + 1 rows the first word found, and :func:`indexed_search`
says so (``truncated``), so the page can ask for one more word. The admin's own search would
read the whole table for it (issue 27: three words at 1M cases did not finish in 6 minutes).
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db import connections
from django.db.models import BooleanField, ExpressionWrapper, F, Q, QuerySet, TextField, Value
from django.db.models.functions import Concat
from django.utils.text import smart_split, unescape_string_literal

RESOLVED_MATCHES = 500
# The words one search asks at most (``too_many_words``): a search reads up to two capped sets
# of rows per word and field.
MAX_WORDS = 10
# What the case list (admin and API) searches: references, the order id, the account.
CASE_FIELDS = ("reference", "order_id", "account__reference", "account__name", "request_key")
_RUN = re.compile(r"[^\W_]{3,}")


def _key_of(word: str) -> str:
    """What the index is asked for ``word``: its longest run of three or more letters or digits
    (the last of equals), or the word itself when it has none or is one."""
    runs = _RUN.findall(word)
    return max(reversed(runs), key=len) if runs else word


def _capped(rows: QuerySet[Any], field: str, key: str, word: str, limit: int) -> QuerySet[Any]:
    """At most ``limit`` rows of ``rows`` that the index gives for ``word`` in ``field``, as
    ``(hf_key, hf_whole)``: the row's key, and whether its ``field`` contains the whole word.

    The rows the index gives for the word's key are capped, not the rows that match the whole
    word: ``ORD-100`` asks the case references' index for ``100``, which 4,000 of 1M references
    hold and none with ``ORD-``; checking them all read 1,161 pages of the table for nothing
    (9 ms, against none at 10k cases). Capped, the check reads at most ``limit`` rows, and a
    word whose key the index finds in ``limit`` rows says that its answer is not complete."""
    candidates = rows.filter(**{f"{field}__icontains": key}).order_by()
    if key == word:
        whole: Any = Value(True, output_field=BooleanField())
    else:
        candidates = candidates.alias(hf_unindexed=_unindexed(field))
        whole = ExpressionWrapper(Q(hf_unindexed__icontains=word), output_field=BooleanField())
    return candidates.annotate(hf_key=F("pk"), hf_whole=whole).values_list("hf_key", "hf_whole")[
        :limit
    ]


def _unindexed(field: str) -> Concat:
    """``CONCAT(field, '')``: the field's text, but not the indexed ``UPPER(field)``; as text,
    which a character field's and a text field's concatenation both are."""
    return Concat(field, Value(""), output_field=TextField())


def words_of(term: str) -> list[str]:
    """The search's words as the admin splits them (quotes keep a phrase together), each once
    (a word said twice asks nothing more)."""
    words: dict[str, str] = {}
    for bit in smart_split(term):
        word = unescape_string_literal(bit) if bit[0] in "\"'" and bit[0] == bit[-1] else bit
        if word.strip():  # an empty quote ("") asks nothing; as a word it matched every row
            words.setdefault(word.casefold(), word)
    return list(words.values())


def too_many_words(term: str) -> str:
    """What is wrong with ``term`` as a search, or "": more than :data:`MAX_WORDS` words.
    Each word costs up to two capped reads per field: sixty words that many rows hold took
    2.4 s at 1M cases; :func:`indexed_search` searches the first :data:`MAX_WORDS` alone."""
    count = len(words_of(term))
    if count <= MAX_WORDS:
        return ""
    return f"Search with at most {MAX_WORDS} words; this search has {count}."


@dataclass(frozen=True)
class _Resolved:
    word: str
    keys: set[Any]
    complete: bool  # every row the word matches is in ``keys``


@dataclass(frozen=True)
class _Part:
    """One capped read of a word's statement: the word's place, the field's, and whether it
    reads the related rows (``others``) or the rows themselves."""

    word: int
    field: int
    others: bool = False

    @property
    def code(self) -> int:
        return 2 * self.field + self.others


def _sql(query: QuerySet[Any]) -> tuple[str, tuple[Any, ...]]:
    return query.query.get_compiler(using=query.db).as_sql()


# What a capped read's statement is compiled with, in place of the key and the whole word:
# letters only, which the pattern's escaping leaves as they are and no other part of the
# statement holds.
_KEY_STANDIN, _WORD_STANDIN = "hfkeystandinqzx", "hfwordstandinqzx"
_STANDINS = re.compile(f"{_KEY_STANDIN}|{_WORD_STANDIN}")


@functools.lru_cache(maxsize=256)
def _capped_statement(
    model: str, alias: str, field: str, whole_too: bool, limit: int
) -> tuple[str, tuple[Any, ...]]:
    """:func:`_capped`'s statement for any word of one shape (its key alone, or its key and the
    whole word), compiled once: the words are bound by :func:`_capped_sql`. Compiling a
    three-word search's 21 reads through the ORM took 3.3 ms of every request."""
    rows = apps.get_model(model)._default_manager.db_manager(alias).all()
    word = _WORD_STANDIN if whole_too else _KEY_STANDIN
    return _sql(_capped(rows, field, _KEY_STANDIN, word, limit))


def _capped_sql(
    rows: QuerySet[Any], field: str, word: str, limit: int
) -> tuple[str, tuple[Any, ...]]:
    """:func:`_capped`'s ``(SQL, params)`` for ``word``: the statement compiled once for its
    shape, with the word's patterns bound as the ORM binds them (``%key%``, escaped)."""
    key = _key_of(word)
    sql, params = _capped_statement(rows.model._meta.label, rows.db, field, key != word, limit)
    escape = connections[rows.db].ops.prep_for_like_query
    bound = {_KEY_STANDIN: escape(key), _WORD_STANDIN: escape(word)}
    return sql, tuple(
        _STANDINS.sub(lambda standin: bound[standin[0]], param) if isinstance(param, str) else param
        for param in params
    )


def _parts(
    rows: QuerySet[Any], fields: Sequence[str], words: Sequence[str], limit: int
) -> Iterator[tuple[_Part, str, tuple[Any, ...]]]:
    """Each capped read of the search, as ``(part, SQL, params)`` selecting ``(key, whole)``:
    one through the field's own index per word and field; for a field of a related row
    (``account__name``) two, never a join of the two tables: the related table's index gives
    at most ``limit`` of its rows, then the rows that point at those matching the whole word
    (the foreign key's index, one related row after another), capped the same way. A join of
    the cases to every account named "Customer", left to the planner, read every case."""
    model = rows.model
    vendor = connections[rows.db].vendor
    quote = connections[rows.db].ops.quote_name
    for w, word in enumerate(words):
        for f, field in enumerate(fields):
            path, _, attribute = field.rpartition("__")
            if not path or "__" in path:
                yield (_Part(w, f), *_capped_sql(rows, field, word, limit))
                continue
            link = model._meta.get_field(path)
            related = link.related_model._default_manager.db_manager(rows.db).all()
            sql, params = _capped_sql(related, attribute, word, limit)
            yield _Part(w, f, others=True), sql, params
            matching = f"SELECT o.hf_key FROM ({sql}) o WHERE o.hf_whole"  # noqa: S608
            table, key = quote(model._meta.db_table), quote(model._meta.pk.column)
            fk = quote(link.column)
            if vendor == "postgresql":
                # Each matching related row's own rows through the foreign key's index, until
                # the cap: a nested loop by construction (LATERAL, its LIMIT keeps the planner
                # from turning it into a join of its choice: at 20k cases it hashed every case),
                # which stops at the cap. As ``fk = ANY(ARRAY(…)) ORDER BY fk`` the planner
                # expected ten keys' rows, read all 5,011 rows of 501 accounts named "Customer"
                # and sorted them (16 ms at 1M cases, against 3 ms).
                pointing = (
                    "SELECT r.hf_key, TRUE AS hf_whole "  # noqa: S608 - metadata
                    f"FROM ({matching}) a CROSS JOIN LATERAL "
                    f"(SELECT c.{key} AS hf_key FROM {table} c WHERE c.{fk} = a.hf_key "
                    f"LIMIT {int(limit)}) r LIMIT {int(limit)}"
                )
            else:
                pointing = (
                    f"SELECT r.{key} AS hf_key, TRUE AS hf_whole FROM {table} r "  # noqa: S608
                    f"WHERE r.{fk} IN ({matching}) ORDER BY r.{fk} LIMIT {int(limit)}"
                )
            yield _Part(w, f), pointing, params


def _resolve_all(
    rows: QuerySet[Any], fields: Sequence[str], words: Sequence[str]
) -> list[_Resolved]:
    """Every word's capped keys, in one statement (``UNION ALL`` of :func:`_parts`): one query
    whatever the words match and however big the table, so a page's query count is the same
    at 10k and 1M cases (asked word by word, field by field, stopping at the first word under
    the cap, the three-word search ran 27 queries at 10k cases and 30 at 1M)."""
    limit = RESOLVED_MATCHES + 1
    parts = list(_parts(rows, fields, words, limit))
    statement = " UNION ALL ".join(
        f"SELECT {part.word}, {part.code}, b.hf_key, b.hf_whole FROM ({sql}) b"  # noqa: S608
        for part, sql, _ in parts
    )
    with connections[rows.db].cursor() as cursor:
        cursor.execute(statement, [value for _, _, params in parts for value in params])
        answered = cursor.fetchall()
    read: dict[tuple[int, int], list[tuple[Any, bool]]] = {}
    for w, code, key, whole in answered:
        read.setdefault((w, code), []).append((key, bool(whole)))
    resolved = []
    for w, word in enumerate(words):
        found: set[Any] = set()  # the rows, once each however many fields match
        complete = True
        for part, _, _ in parts:
            if part.word != w:
                continue
            got = read.get((w, part.code), [])
            complete = complete and len(got) < limit
            if not part.others:
                found.update(key for key, whole in got if whole)
        resolved.append(_Resolved(word, found, complete and len(found) <= RESOLVED_MATCHES))
    return resolved


def indexed_search(
    queryset: QuerySet[Any], fields: Sequence[str], term: str
) -> tuple[QuerySet[Any], bool]:
    """``queryset`` narrowed to the rows each word of ``term`` matches in one of ``fields``
    (plain ``icontains`` paths), and whether the answer was cut (every word matched more than
    :data:`RESOLVED_MATCHES` rows: then only the matches among one word's first ones)."""
    words = words_of(term)[:MAX_WORDS]
    if not words or not fields:
        return queryset, False
    if any("\x00" in word for word in words):
        # No stored text holds a NUL (PostgreSQL refuses one in text, and in a comparison with
        # text: a 500 the API's schema fuzzing found), so no row matches every word.
        return queryset.none(), False
    rows = queryset.model._default_manager.all()
    # Words with a digit first: references and order ids, which few rows share.
    words.sort(key=lambda word: not any(c.isdigit() for c in word))
    resolved = _resolve_all(rows, fields, words)
    chosen = next((answer for answer in resolved if answer.complete), None)
    truncated = chosen is None
    if chosen is None:  # every word matched many rows: the first one's first rows
        first = resolved[0]
        # Two fields' capped keys can make twice the cap: the page reads each key (at 1M
        # cases, 800 keys made the API's three-word search 1.37x its time at 10k).
        chosen = _Resolved(first.word, set(sorted(first.keys)[: RESOLVED_MATCHES + 1]), False)
    queryset = queryset.filter(pk__among=sorted(chosen.keys))
    # The other words are checked, as the admin's own search would, on those rows only.
    checks = {f"hf_check_{i}": _unindexed(field) for i, field in enumerate(fields)}
    others = [word for word in words if word is not chosen.word]
    if others:
        queryset = queryset.alias(**checks)
    for word in others:
        matches = (Q(**{f"{name}__icontains": word}) for name in checks)
        queryset = queryset.filter(functools.reduce(operator.or_, matches))
    return queryset, truncated
