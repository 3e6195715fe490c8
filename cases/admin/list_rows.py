"""The rows of every admin list page, written out: Django's ``items_for_result``, character for
character, with what does not change from row to row worked out once per page.

Django's admin builds each cell of a list on its own: it looks the column up again (field,
admin method or model attribute), asks the admin for its empty value, reverses the row's link
and merges the page's filters into it, and formats the cell through ``format_html``; the
template then loops over the cells one by one. On the case list (50 rows of 13 columns) that was
a third of the page's time (a sampling profile at 10k cases: 31% in ``items_for_result``), and
the lists are what people read all day, and what twenty users at once wait on.

Here each column is planned once per page (:class:`_Column`): whether it is a field, an admin
method or a model attribute, its CSS class, its empty value, whether it links to the row. The
link is reversed once, for a marker id, and the row's id put in its place. Each row is then one
string: the template's loop runs once per row instead of once per cell.

The value of each cell still goes through Django's own ``display_for_field`` and
``display_for_value``, and a column this plan does not cover (a model attribute reached
through relations, a property, a method of the model) through Django's ``lookup_field``. Pages
with editable rows (``list_editable``) or opened as a popup keep Django's rendering.
``tests/cases/test_list_rows.py`` holds every admin list page's rows to Django's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.templatetags import admin_list
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import (
    FieldIsAForeignKeyColumnName,
    display_for_field,
    display_for_value,
    lookup_field,
)
from django.core.exceptions import FieldDoesNotExist, ObjectDoesNotExist
from django.db import models
from django.urls import NoReverseMatch, reverse
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

# The id the row's link is reversed for once per page; each row's own id takes its place. Only
# digits: reversing leaves it as it is, and the admin's URLs have no digits before the id.
_MARKER = "90817263544536271809"

_FIELD, _ADMIN, _LOOKUP = "field", "admin", "lookup"


@dataclass(frozen=True)
class _Column:
    """What every row's cell of one column shares."""

    name: Any  # a field's or a method's name, or a callable
    way: str  # _FIELD, _ADMIN (a callable or a method of the admin) or _LOOKUP
    field: models.Field | None
    method: Callable[[Any], Any] | None
    classes: str  # "field-…", before what the value adds
    tag: str  # "th" for the first linked column, else "td"
    link: bool
    nowrap: bool  # a date, time or foreign-key field: always "nowrap"


def _field(opts: Any, name: Any) -> models.Field:
    """The concrete field ``lookup_field`` reads the column's value from, by its rule: not a
    generic or reverse relation, and not a foreign key named by its column (``account_id``,
    which it shows as the raw value). Raises as it does when there is none."""
    field = opts.get_field(name)
    if field.is_relation and ((field.many_to_one and not field.related_model) or field.one_to_many):
        raise FieldDoesNotExist(name)
    if field.is_relation and not field.many_to_many and getattr(field, "attname", None) == name:
        raise FieldIsAForeignKeyColumnName(name)
    return field


def _way(name: Any, opts: Any, model_admin: Any) -> tuple[str, Any, Any]:
    """How ``lookup_field`` would reach the column's value, as far as it is the same for every
    row: a concrete field, a callable (the column itself, or the admin's method), else left to
    ``lookup_field`` row by row."""
    try:
        field = _field(opts, name)
    except (FieldDoesNotExist, FieldIsAForeignKeyColumnName):
        if callable(name):
            return _ADMIN, None, name
        if hasattr(model_admin, name) and name != "__str__":
            return _ADMIN, None, getattr(model_admin, name)
        return _LOOKUP, None, None
    return _FIELD, field, None


def _css_name(name: Any, index: int) -> str:
    """The column's name in its cells' class (``field-…``), as Django writes it: a callable
    by its own name, a lambda by its position."""
    if callable(name):
        return f"lambda{index}" if name.__name__ == "<lambda>" else name.__name__
    return str(name)


def columns(cl: Any) -> list[_Column]:
    """The page's columns, in ``list_display``'s order."""
    planned = []
    first = True
    for index, name in enumerate(cl.list_display):
        if cl.list_display_links is None:
            link = False
        elif first and not cl.list_display_links:
            link = True
        else:
            link = name in cl.list_display_links
        tag = "th" if link and first else "td"
        if link:
            first = False
        way, field, method = _way(name, cl.lookup_opts, cl.model_admin)
        nowrap = field is not None and isinstance(
            field, models.DateField | models.TimeField | models.ForeignKey
        )
        planned.append(
            _Column(
                name=name,
                way=way,
                field=field,
                method=method,
                classes=f"field-{_css_name(name, index)}",
                tag=tag,
                link=link,
                nowrap=nowrap,
            )
        )
    return planned


class _Links:
    """Each row's link to its change page, as Django's ``items_for_result`` writes it: reversed
    once for a marker id, with the page's preserved filters, then the row's id in its place."""

    def __init__(self, cl: Any) -> None:
        self.cl = cl
        self.head = self.tail = ""
        self.templated = False
        try:
            url = reverse(
                f"admin:{cl.opts.app_label}_{cl.opts.model_name}_change",
                args=(_MARKER,),
                current_app=cl.model_admin.admin_site.name,
            )
        except NoReverseMatch:
            return
        head, found, tail = self._preserving(url).partition(_MARKER)
        if found and _MARKER not in head:
            self.head, self.tail, self.templated = head, tail, True

    def __call__(self, result: Any) -> str | None:
        """The row's link (None: the change page has no URL)."""
        pk = getattr(result, self.cl.pk_attname)
        if self.templated and type(pk) is int:
            return f"{self.head}{pk}{self.tail}"
        try:
            return self._preserving(self.cl.url_for_result(result))
        except NoReverseMatch:
            return None

    def _preserving(self, url: str) -> str:
        """``url`` with the page's filters, for the way back to this list."""
        context = {"preserved_filters": self.cl.preserved_filters, "opts": self.cl.opts}
        return add_preserved_filters(context, url)


def _cell(column: _Column, result: Any, model_admin: Any, empty: str) -> tuple[Any, str]:
    """The cell's text (escaped when written) and its classes, as ``items_for_result``."""
    field: Any
    attr: Any
    value: Any
    try:
        if column.way == _FIELD:
            field, attr, value = column.field, None, getattr(result, column.name)
        elif column.way == _ADMIN:
            field, attr, value = None, column.method, column.method(result)  # type: ignore[misc]
        else:
            field, attr, value = lookup_field(column.name, result, model_admin)
    except ObjectDoesNotExist:
        return empty, column.classes
    empty = getattr(attr, "empty_value_display", empty)
    if isinstance(value, str) and value.strip() == "":
        value = ""
    classes = column.classes
    if field is None or field.auto_created:
        if column.name == "action_checkbox":
            classes = "action-checkbox"
        boolean = getattr(attr, "boolean", False)
        if isinstance(attr, property) and hasattr(attr, "fget"):
            boolean = getattr(attr.fget, "boolean", False)
        text = display_for_value(value, empty, boolean)
        if isinstance(value, dt.date | dt.time):
            classes += " nowrap"
        return text, classes
    if isinstance(field.remote_field, models.ManyToOneRel):
        related = getattr(result, field.name)
        text = empty if related is None else related
    else:
        text = display_for_field(value, field, empty, avoid_link=column.link)
    if column.nowrap:
        classes += " nowrap"
    return text, classes


def rows(cl: Any) -> Iterator[admin_list.ResultList]:
    """The page's rows, each one string of its cells (the shape ``change_list_results.html``
    loops over: a ``ResultList`` of cells, here of one)."""
    if cl.formset or cl.is_popup:
        yield from admin_list.results(cl)
        return
    model_admin = cl.model_admin
    empty = model_admin.get_empty_value_display()
    planned = columns(cl)
    links = _Links(cl)
    escape = conditional_escape
    for result in cl.result_list:
        cells = []
        for column in planned:
            text, classes = _cell(column, result, model_admin, empty)
            shown: str = escape(text)
            if column.link:
                url = links(result)
                if url is not None:
                    shown = f'<a href="{escape(url)}">{shown}</a>'
                cells.append(f'<{column.tag} class="{classes}">{shown}</{column.tag}>')
            else:
                cells.append(f'<td class="{classes}">{shown}</td>')
        yield admin_list.ResultList(None, [mark_safe("".join(cells))])  # noqa: S308 - escaped


def result_list(cl: Any) -> dict[str, Any]:
    """Django's ``result_list`` context, with :func:`rows` for its rows."""
    headers = list(admin_list.result_headers(cl))
    return {
        "cl": cl,
        "result_hidden_fields": list(admin_list.result_hidden_fields(cl)),
        "result_headers": headers,
        "num_sorted_fields": sum(1 for h in headers if h["sortable"] and h["sorted"]),
        "results": list(rows(cl)),
    }
