"""The list pages' search, answered by each field's own index (``cases.search``)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest

from cases import search


class IndexedSearchMixin:
    """``get_search_results`` for search fields that are plain ``icontains`` lookups: each word
    a capped set of keys through each field's index (:func:`cases.search.indexed_search`); when
    every word matched more than the cap, the page says its answer is cut."""

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        fields = list(self.get_search_fields(request))  # type: ignore[attr-defined]
        if not search_term or not fields or any(f[0] in "^=@" for f in fields):
            return super().get_search_results(request, queryset, search_term)  # type: ignore[misc]
        if message := search.too_many_words(search_term):
            messages.warning(
                request,
                f"{message} Only the first {search.MAX_WORDS} were searched.",
                fail_silently=True,
            )
        found, truncated = search.indexed_search(queryset, fields, search_term)
        if truncated:
            messages.info(
                request,
                f"Every word of the search is in more than {search.RESOLVED_MATCHES:,} rows, "
                "too many to check them all: shown are the matches among the first "
                f"{search.RESOLVED_MATCHES:,} rows of one word. Add a word (a reference, an "
                "order id) to narrow the search.",
                fail_silently=True,
            )
        return found, False
