"""A filter whose parts never hold for the same row, so that a bounded count can count it part
by part (:func:`split_parts`, used by ``cases.paging``).

A bounded count of an ``OR`` (``SELECT COUNT(*) FROM (… WHERE a OR b LIMIT n)``) is planned
by PostgreSQL as a ``BitmapOr``: both parts' bitmaps are built in full before the first row
is counted, so the count grows with the rows each part matches, not with ``n``. Counted part
by part (``(… WHERE a LIMIT n) UNION ALL (… WHERE b LIMIT n)``), each part stops at ``n`` in
its own index. The sum is the ``OR``'s count only if no row is in two parts: the caller of
:class:`EitherOf` says so, and its parts must make it true.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.db.models.lookups import Exact
from django.db.models.sql.where import OR, WhereNode


class DisjointWhere(WhereNode):
    """The resolved :class:`EitherOf`: an ``OR`` of parts that never hold together."""


class EitherOf:
    """``filter(EitherOf(Q(…), Q(…)))``: the rows for which one of the parts holds, where the
    caller guarantees that no row satisfies two of them (the SQL is their ``OR``)."""

    conditional = True

    def __init__(self, *parts: Q) -> None:
        self.parts = parts

    def resolve_expression(
        self,
        query: Any = None,
        allow_joins: bool = True,
        reuse: Any = None,
        summarize: bool = False,
        for_save: bool = False,
    ) -> DisjointWhere:
        node = DisjointWhere(connector=OR)
        for part in self.parts:
            node.children.append(
                part.resolve_expression(query, allow_joins, reuse, summarize, for_save)
            )
        return node


def _parts_of(child: Any) -> DisjointWhere | None:
    """The :class:`DisjointWhere` at ``child`` (a filter puts it there as ``Exact(it, True)``),
    or None."""
    node = child.lhs if isinstance(child, Exact) and child.rhs is True else child
    return node if isinstance(node, DisjointWhere) and not node.negated else None


def _path_to_parts(node: WhereNode, path: tuple[int, ...] = ()) -> tuple[int, ...] | None:
    """Where the :class:`DisjointWhere` sits in ``node``: the child indexes down to it, through
    ``AND`` nodes that are not negated only (under an ``OR`` or a ``NOT``, counting part by part
    would not count the same rows)."""
    if node.negated or node.connector != "AND":
        return None
    for index, child in enumerate(node.children):
        if _parts_of(child) is not None:
            return (*path, index)
        if isinstance(child, WhereNode):
            found = _path_to_parts(child, (*path, index))
            if found is not None:
                return found
    return None


def _holder(node: Any, path: tuple[int, ...]) -> Any:
    """The node whose child the last index of ``path`` names."""
    for index in path[:-1]:
        node = node.children[index]
    return node


def split_parts(rows: Any) -> list[Any] | None:
    """``rows`` (a queryset) as one queryset per part of its :class:`EitherOf` filter, which
    together hold the same rows and no row twice; None when it has none (or only under an
    ``OR``, a ``NOT``, a ``DISTINCT``, a slice or a combination)."""
    query = rows.query
    if query.combinator or query.distinct or query.is_sliced:
        return None
    path = _path_to_parts(query.where)
    if path is None:
        return None
    found = _parts_of(_holder(query.where, path).children[path[-1]])
    assert found is not None  # (the path leads to it)
    queries = []
    for part in found.children:
        one = query.clone()  # (its where is a copy, node for node: the same path leads in it)
        _holder(one.where, path).children[path[-1]] = part
        chained = rows._chain()
        chained.query = one
        queries.append(chained)
    return queries
