"""List pages that count at most a bounded number of rows: a page costs the same at 1M cases
as at 10k.

A full ``COUNT(*)`` reads every visible row, so a list page's cost grows with the table even
when the page itself is read through an index. :class:`BoundedCountPaginator` counts at most
:data:`COUNT_CAP` rows past the start of the page asked for (``SELECT COUNT(*) FROM (… LIMIT
n)``): while the rows end before that the count is exact; otherwise it is that bound, shown as
"1,000+" (:class:`BoundedCount`). Every page stays reachable: the bound moves with the page
(page 10 counts to its first row plus the cap), so "next" is offered as long as there are
rows, and a deep page costs what its ``OFFSET`` costs anyway.

Used by the admin's list pages (:class:`BoundedCountAdminMixin`) and the API's
(:class:`BoundedPageNumberPagination`, whose ``count_capped`` says the count is a bound).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.paginator import Paginator
from django.db import connections
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from cases.disjoint import split_parts
from cases.search import RESOLVED_MATCHES

COUNT_CAP = 1_000
# No count reads further than this: a bound no table reaches, and one that still fits the
# 64-bit LIMIT of PostgreSQL (bigint) and SQLite. A page number whose rows start past it
# (``?page=4303703354380503545786585604870373376``) is counted to here, found empty and
# refused like any page past the last one, instead of sending the database a LIMIT it
# refuses ("bigint out of range": a 500).
ROW_BOUND = 2**62


class BoundedCount(int):
    """A row count that may be capped: ``capped`` when there are more rows than the value; it
    prints as "10,000+" then, so every template that shows the count tells the truth."""

    capped: bool

    def __new__(cls, value: int, *, capped: bool = False) -> BoundedCount:
        count = super().__new__(cls, value)
        count.capped = capped
        return count

    def __str__(self) -> str:
        return f"{int(self):,}+" if self.capped else str(int(self))

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(int(self), spec)


def count_at_most(rows: Any, limit: int) -> int:
    """How many of ``rows`` (a queryset) there are, reading at most ``limit`` of them: no ORDER
    BY (nothing to sort for a count), only the primary key.

    A queryset filtered by a :class:`cases.disjoint.EitherOf` is counted part by part where
    the database takes a ``LIMIT`` in each part of a ``UNION ALL`` (PostgreSQL, not SQLite):
    each part stops at ``limit`` in its own index, where the ``OR`` built every part's whole
    bitmap first (the case list filtered by who is responsible now, at 1M cases: the person's
    28k cases, the 28k they back up and the away owners' 83k, 12.8 ms, to count 1,001; part by
    part, with ``case_backup_owner_idx``, 0.4 ms)."""
    parts = split_parts(rows)
    if parts and connections[rows.db].features.supports_slicing_ordering_in_compound:
        counted = [part.order_by().values("pk")[:limit] for part in parts]
        return min(counted[0].union(*counted[1:], all=True).count(), limit)
    return rows.order_by().values("pk")[:limit].count()


class BoundedCountPaginator(Paginator):
    """A paginator whose count reads at most :data:`COUNT_CAP` rows past the start of the page
    asked for (:meth:`for_page`, or :meth:`page` before anything read the count)."""

    cap = COUNT_CAP
    first_page = 1

    def for_page(self, number: Any) -> BoundedCountPaginator:
        """Count from the start of page ``number`` (a request's raw value; anything that is
        not a page number counts from the first page, whose answer the caller gives)."""
        try:
            self.first_page = max(1, int(number))
        except (TypeError, ValueError):
            self.first_page = 1
        return self

    def page(self, number: Any) -> Any:
        if "count" not in self.__dict__:
            self.for_page(number)
        return super().page(number)

    @cached_property
    def count(self) -> BoundedCount:
        bound = min((self.first_page - 1) * self.per_page + self.cap, ROW_BOUND)
        rows: Any = self.object_list
        counted = count_at_most(rows, bound + 1) if hasattr(rows, "order_by") else len(rows)
        if counted > bound:
            return BoundedCount(bound, capped=True)
        return BoundedCount(counted)


class BoundedCountAdminMixin:
    """A ``ModelAdmin`` whose list page counts at most :data:`COUNT_CAP` rows past the page
    shown (:class:`BoundedCountPaginator`); with ``show_full_result_count = False`` (no second
    count of every row) the page costs the same however many rows there are.

    Each row's action checkbox is written out (:meth:`action_checkbox`) rather than rendered
    through a form widget's template: the same HTML, but Django's widget cost a fifth of the
    case list's time (100 rows: 0.2 s of 0.9 s over five profiled requests).

    A page shows 50 rows (``list_per_page``), as the API's pages and the inbox do: Django's
    100 cost the case list two thirds of its time in rendering rows (100 rows of 13 columns:
    about 100 of 158 ms a request at 1M cases), and under twenty users each page waited on the
    ones before it."""

    list_per_page = 50

    def action_checkbox(self, obj: Any) -> SafeString:
        """Django's ``ModelAdmin.action_checkbox``, character for character
        (``tests/cases/test_list_scaling.py`` compares them), without the widget template."""
        label = format_html(gettext("Select this object for an action - {}"), str(obj))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            ACTION_CHECKBOX_NAME,
            str(obj.pk),
            label,
        )

    def get_paginator(
        self,
        request: Any,
        queryset: Any,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> Paginator:
        from django.contrib.admin.views.main import PAGE_VAR

        paginator = BoundedCountPaginator(queryset, per_page, orphans, allow_empty_first_page)
        return paginator.for_page(request.GET.get(PAGE_VAR, 1))


class BoundedPageNumberPagination(PageNumberPagination):
    """DRF's page-number pagination over :class:`BoundedCountPaginator`; the answer adds
    ``count_capped`` (true: there are more rows than ``count``, and paging reaches the first
    ``count``)."""

    django_paginator_class = BoundedCountPaginator

    def get_page_number(self, request: Any, paginator: Any) -> Any:
        """The page asked for, as DRF reads it -- except that an empty ``page=`` is not read as
        the first page: like ``page=x`` it is refused (404 "Invalid page"), as the schema's
        ``integer`` says."""
        raw = request.query_params.get(self.page_query_param)
        return raw if raw == "" else super().get_page_number(request, paginator)

    def get_paginated_response(self, data: Any) -> Response:
        assert self.page is not None  # set by paginate_queryset before the response
        count = self.page.paginator.count
        return Response(
            {
                "count": int(count),
                "count_capped": bool(getattr(count, "capped", False)),
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        described = super().get_paginated_response_schema(schema)
        described["required"] = [*described.get("required", []), "count_capped"]
        described["properties"] = {
            "count": described["properties"]["count"],
            "count_capped": {
                "type": "boolean",
                "example": False,
                "description": f"More rows than count: counting stops {COUNT_CAP:,} rows "
                "past the page asked for.",
            },
            **{k: v for k, v in described["properties"].items() if k != "count"},
        }
        return described


class SearchedPageNumberPagination(BoundedPageNumberPagination):
    """:class:`BoundedPageNumberPagination` for a list searched by words (``q``,
    ``cases.search``); the answer adds ``search_cut``: true when every word was in more rows
    than the search checks, so the page holds the matches among the first of them only (the
    view says so in its ``search_cut``)."""

    search_cut = False

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self.search_cut = bool(getattr(view, "search_cut", False))
        return super().paginate_queryset(queryset, request, view)

    def get_paginated_response(self, data: Any) -> Response:
        response = super().get_paginated_response(data)
        response.data = {**response.data, "search_cut": self.search_cut}
        return response

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        described = super().get_paginated_response_schema(schema)
        described["required"] = [*described["required"], "search_cut"]
        described["properties"] = {
            **described["properties"],
            "search_cut": {
                "type": "boolean",
                "example": False,
                "description": "Every word of q is in more rows than the search checks "
                f"({RESOLVED_MATCHES:,} a word): the results are the matches among the first "
                "of them only. Add a word (a reference, an order id) to narrow the search.",
            },
        }
        return described
