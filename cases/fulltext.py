"""Full-text search of cases: their note, the reason they wait, their timeline (every event's
reason) and their owners' names.

Bounded by design: each source is asked through its own index, in one small query capped at
:data:`CAP` rows, and the answer is a set of at most ``CAP`` case ids per source, which the case
list then filters on (primary-key lookups, scoped to the reader's teams there). A search costs
the same fixed number of queries however many cases, events or matches there are, and never
joins two large tables.

On PostgreSQL a text matches when its words match (``to_tsvector('english', …) @@
websearch_to_tsquery('english', …)``: stemmed, quoted phrases and ``-word`` allowed) or when it
contains the words as typed (``icontains``: part of a word, a code); each has a GIN index
(``cases`` migration case_fulltext_search_indexes, and 0015 for the events' reason). Other
databases (SQLite) have neither: there the text must contain each word as typed, anywhere in
it (``icontains``, read from the table), a "quoted phrase" as a whole and none of the ``-word``s:
what ``websearch_to_tsquery`` asks of the words, without the stemming.
"""

from __future__ import annotations

import re
from itertools import islice

from django.contrib.auth import get_user_model
from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet

from cases.models import Case, CaseEvent
from cases.search import MAX_WORDS

# At most this many case ids per source (and owners per name): the rest is not looked at.
CAP = 200
# Owners whose name matches, at most (the people of a desk are few; a common letter is not).
PEOPLE_CAP = 50
MIN_LENGTH = 3  # fewer characters give no trigram: no full-text search for them


# A word of a web search: optionally negated (``-word``), a "quoted phrase" or a word.
_WEB_WORD = re.compile(r'(-?)"([^"]+)"|(-?)(\S+)')


def web_words(term: str) -> tuple[list[str], list[str]]:
    """The words ``term`` asks for (a "quoted phrase" as one) and those it asks to be absent
    (``-word``), as a web search reads them."""
    wanted: list[str] = []
    unwanted: list[str] = []
    for match in _WEB_WORD.finditer(term):
        negated, text = (match.group(1), match.group(2)) if match.group(2) else match.group(3, 4)
        text = text.strip('"')
        if text:
            (unwanted if negated else wanted).append(text)
    return wanted, unwanted


def _every_word(field: str, term: str) -> Q:
    """``field`` holds each word of ``term`` (a quoted phrase as a whole) and none of its
    ``-word``s, as typed; a term of only ``-word``s asks for the term as typed."""
    wanted, unwanted = web_words(term)
    if not wanted:
        return Q(**{f"{field}__icontains": term})
    holds = Q()
    for word in wanted:
        holds &= Q(**{f"{field}__icontains": word})
    for word in unwanted:
        holds &= ~Q(**{f"{field}__icontains": word})
    return holds


def _matches(field: str, term: str) -> Q:
    """``field`` matches ``term``: by its words or as typed (PostgreSQL), or holding each of
    its words (other databases)."""
    if connection.vendor != "postgresql":
        return _every_word(field, term)
    typed = Q(**{f"{field}__icontains": term})
    return typed | Q(
        **{f"hf_words_{field}": SearchQuery(term, config="english", search_type="websearch")}
    )


def _searchable(rows: QuerySet, *fields: str) -> QuerySet:
    """``rows`` ready for :func:`_matches` on ``fields`` (PostgreSQL: their words, aliased)."""
    if connection.vendor != "postgresql":
        return rows
    return rows.alias(
        **{f"hf_words_{field}": SearchVector(field, config="english") for field in fields}
    )


def _source(rows: QuerySet, field: str, term: str, case_field: str) -> set[int]:
    """At most :data:`CAP` ids of the cases whose ``field`` (of ``rows``) matches ``term``
    (the first ``CAP`` matching rows: a word on a million events reads no more than that)."""
    rows = _searchable(rows, field)
    ids = rows.filter(_matches(field, term)).order_by().values_list(case_field, flat=True)
    return set(ids[:CAP])


def owners_named(term: str) -> list[int]:
    """Ids of at most :data:`PEOPLE_CAP` people whose username, first or last name contains
    ``term``, or whose first and last name are its two words."""
    query = (
        Q(username__icontains=term) | Q(first_name__icontains=term) | Q(last_name__icontains=term)
    )
    words = term.split()
    if len(words) == 2:
        query |= Q(first_name__iexact=words[0], last_name__iexact=words[1])
    people = get_user_model().objects.filter(query).order_by()
    return list(people.values_list("pk", flat=True)[:PEOPLE_CAP])


def case_ids_matching(term: str, *, team_ids: list[int] | None = None) -> set[int]:
    """The ids of the cases whose note, waiting reason, timeline or owner's name
    matches ``term``: at most :data:`CAP` per source, in five queries (none for a term shorter
    than :data:`MIN_LENGTH`). ``team_ids``: only the cases of these teams (``None``: every
    team's, a superuser's search)."""
    # The first words alone, as the list's own search (``cases.search.MAX_WORDS``): each
    # ``-word`` is one more test of every case found (sixty made a page 0.9 s at 1M cases).
    term = " ".join(match.group(0) for match in islice(_WEB_WORD.finditer(term), MAX_WORDS))
    if len(term) < MIN_LENGTH:
        return set()
    cases = Case.objects.all() if team_ids is None else Case.objects.filter(team__in=team_ids)
    # The timeline is asked through its index alone, never joined to the cases (a team's
    # cases times their events is no bounded read): the list scopes those ids to the teams.
    events = CaseEvent.objects.all()
    found = _source(cases, "note", term, "pk")
    found |= _source(cases, "waiting_reason", term, "pk")
    found |= _source(events, "reason", term, "case_id")
    people = owners_named(term)
    if people:
        owned = cases.filter(owner__in=people).order_by()
        found |= set(owned.values_list("pk", flat=True)[:CAP])
    unwanted = web_words(term)[1]
    if unwanted and found:
        found = _holding_none(found, unwanted)
    return found


def _holding_none(ids: set[int], words: list[str]) -> set[int]:
    """Of the cases ``ids``, those whose note, waiting reason and timeline hold none of
    ``words``: a ``-word`` leaves a case out wherever it stands in it, not only the one text
    that matched (one query, over those cases alone)."""
    cases = _searchable(Case.objects.filter(pk__among=sorted(ids)), "note", "waiting_reason")
    events = _searchable(CaseEvent.objects.filter(case_id=OuterRef("pk")), "reason")
    for word in words:
        cases = cases.exclude(_matches("note", word) | _matches("waiting_reason", word))
        cases = cases.exclude(Exists(events.filter(_matches("reason", word))))
    return set(cases.order_by().values_list("pk", flat=True))
