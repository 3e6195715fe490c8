"""Statements written out for the hot path, with the ORM's own conversions.

A worker's steps run the same few statements thousands of times; building and compiling each
through the ORM cost more of the worker's time than the database took to run it. Here are the
pieces the written-out statements share: the columns a model selects, a model instance loaded
from them with each field's conversion, a cursor whose statements PostgreSQL keeps prepared,
and the locked read of one row with its related rows. Each caller keeps the ORM's way for the
other databases, and a test checks that both read and write the same.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from django.db import DatabaseError, connection, connections, models, transaction


def columns(model: Any, alias: str) -> str:
    """``model``'s columns, qualified by ``alias``, in its fields' order."""
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


@functools.cache
def _loading(model: Any) -> tuple[list[str], list[tuple[int, Any]]]:
    """What :func:`load` needs of ``model``, worked out once: the attribute names of its
    columns in :func:`columns`'s order, and the fields that convert their database value (the
    JSON fields), by position."""
    fields = model._meta.concrete_fields
    converting = [(i, f) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]
    return [field.attname for field in fields], converting


def width(model: Any) -> int:
    """How many columns :func:`columns` selects."""
    return len(model._meta.concrete_fields)


def load(model: Any, values: tuple[Any, ...] | list[Any], db: Any) -> Any:
    """A model instance from its columns as selected by :func:`columns`, with each field's own
    conversion from the database (the JSON fields). ``db``: the connection it came from."""
    attnames, converting = _loading(model)
    if len(values) != len(attnames):
        raise ValueError(f"{model.__name__}: {len(values)} values for {len(attnames)} columns")
    converted = list(values)
    for i, field in converting:
        if converted[i] is not None:
            converted[i] = field.from_db_value(converted[i], None, db)
    return model.from_db(db.alias, attnames, converted)


def current() -> Any:
    """The connection itself, not the thread's proxy to it (each attribute of the proxy is a
    lookup of its own)."""
    return connections[connection.alias]


class _Kept:
    """The connection's kept cursor (see :func:`prepared_cursor`), lent for one block: wrapped
    afresh each time (the query log and the execute wrappers in force now see it), left open at
    the end of the block."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.lent = raw, False

    def lend(self, db: Any) -> _Kept:
        self.wrapped = db._prepare_cursor(self.raw)  # noqa: SLF001 - Django's own wrapping
        return self

    def __enter__(self) -> Any:
        self.lent = True
        return self.wrapped

    def __exit__(self, *exc: object) -> None:
        self.lent = False


def prepared_cursor(*, numbered: bool = False) -> Any:
    """A cursor that binds its parameters on the server, so that PostgreSQL can keep the
    statement prepared (psycopg prepares it once the connection ran it ``prepare_threshold``
    times, ``DB_PREPARE_THRESHOLD``): planning the claim's read costs several times running it.
    Django's own cursors do too unless ``DB_SERVER_SIDE_BINDING=0`` (then they bind on the
    client: the values become part of the text, which is never the same twice); these stay
    prepared either way. Wrapped as Django wraps its own, so query logs and execute wrappers
    see it.

    For ``with`` only, and read within the block: the connection keeps one such cursor for
    these statements (making and closing one cost 12 µs, twice a claim). A block inside
    another's gets a cursor of its own, closed at its end.

    ``numbered``: the cursor takes PostgreSQL's own placeholders (``$1``, a list of values),
    for a statement :func:`numbered` wrote out once. psycopg converts ``%s`` placeholders on
    each execute and keeps the conversion only for a statement under 4,096 characters and 50
    parameters: the one-statement claim is longer, and converting it was 0.1 ms of a claim."""
    import psycopg

    make = psycopg.RawCursor if numbered else psycopg.Cursor
    key = "_hf_kept_numbered_cursor" if numbered else "_hf_kept_cursor"
    db = current()
    db.ensure_connection()
    kept: _Kept | None = db.__dict__.get(key)
    if kept is None or kept.raw.closed or kept.raw.connection is not db.connection:
        kept = db.__dict__[key] = _Kept(make(db.connection))
    elif kept.lent:  # a block inside another's: a cursor of its own, closed by its ``with``
        return db._prepare_cursor(make(db.connection))  # noqa: SLF001
    return kept.lend(db)


_NAMED = re.compile(r"%\((\w+)\)s|%%|%")


@functools.cache
def numbered(statement: str) -> tuple[str, tuple[str, ...]]:
    """``statement``, whose placeholders are named (``%(name)s``, ``%%`` for a percent sign),
    with PostgreSQL's numbered ones instead (``$1``: one number a name, however often it is
    used), and the names in their numbers' order: the values are
    ``[params[name] for name in names]``, for a :func:`prepared_cursor` that is ``numbered``."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            if match.group(0) == "%":
                raise ValueError(f"A lone % in a statement with named placeholders: {statement}")
            return "%"
        return f"${names.setdefault(name, len(names) + 1)}"

    return _NAMED.sub(number, statement), tuple(names)


def fetchone_named(statement: str, params: dict[str, Any]) -> Any:
    """Run ``statement`` (named placeholders) with ``params`` on a :func:`prepared_cursor`;
    its first row. Numbered once (:func:`numbered`) unless Django's query log is on: the log
    writes a statement out by psycopg's ``%s`` placeholders, so a logged one goes as it is."""
    db = current()
    if db.queries_logged:
        with prepared_cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchone()
    text, names = numbered(statement)
    with prepared_cursor(numbered=True) as cursor:
        cursor.execute(text, [params[name] for name in names])
        return cursor.fetchone()


# --- writes held for the next statement -------------------------------------------------------


_Write = tuple[str, Any, Callable[[Any], None] | None]


@dataclass
class _Held:
    """What :func:`writes_held` holds: each write's statement, its parameters, and what to do
    with its cursor once its answer is in (None: nothing)."""

    writes: list[_Write] = dataclass_field(default_factory=list)
    sending: bool = False


_HELD = "_hf_writes_held"  # the connection's attribute while a block holds writes


@contextmanager
def writes_held() -> Iterator[None]:
    """Inside, on PostgreSQL, a write whose answer its caller does not read at once
    (:func:`save_fields`, :func:`update_unread`, :func:`insert` with ``hold``) waits, and goes
    to the server with the next statement, whichever it is, in one round trip (psycopg's
    pipeline mode): the held writes first, in order, then that statement. What is still held
    when the block ends goes then, in one round trip. The server runs the same statements in
    the same order; only the waits between them go (``tests/reconciliation/test_hot_path.py``
    counts the round trips of a safe apply).

    An error of a held write is raised by the statement that carries it. A block left by an
    exception drops what it still holds, and the transaction it is in is marked to roll back:
    it may not commit without those writes. For use inside ``transaction.atomic``; elsewhere
    (another database, a block inside another's) it holds nothing of its own."""
    db = current()
    if db.vendor != "postgresql" or _HELD in db.__dict__:
        yield
        return
    held = db.__dict__[_HELD] = _Held()
    try:
        with db.execute_wrapper(_carry):
            yield
            _send(db, held, None)
    except BaseException:
        if held.writes and db.in_atomic_block:
            transaction.set_rollback(True)
        raise
    finally:
        del db.__dict__[_HELD]


def _hold(db: Any, statement: str, params: Any, done: Callable[[Any], None] | None) -> bool:
    """Hold a write for the next statement when a :func:`writes_held` block is open; whether it
    was held."""
    held: _Held | None = db.__dict__.get(_HELD)
    if held is None or held.sending:
        return False
    held.writes.append((statement, params, done))
    return True


def _carry(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """The execute wrapper of a :func:`writes_held` block: the next statement carries what is
    held."""
    import psycopg

    db = context["connection"]
    held: _Held | None = db.__dict__.get(_HELD)
    if held is None or held.sending or not held.writes:
        return execute(sql, params, many, context)
    if isinstance(getattr(context.get("cursor"), "cursor", None), psycopg.ServerCursor):
        # A server-side cursor (the ORM's ``iterator()``) cannot run in a pipeline: the held
        # writes go first, in a round trip of their own.
        _send(db, held, None)
        return execute(sql, params, many, context)
    return _send(db, held, lambda: execute(sql, params, many, context))


def _send(db: Any, held: _Held, then: Callable[[], Any] | None) -> Any:
    """Send the held writes and then ``then`` (the statement that carries them) in one
    pipeline; once the server answered all of them, give each held write its answer. The
    writes go through Django's own cursors, so the query log and the execute wrappers see
    each."""
    import psycopg

    writes, held.writes = held.writes, []
    if not writes:
        return None if then is None else then()
    held.sending = True
    sent: list[tuple[Any, Callable[[Any], None] | None]] = []
    try:
        with db.wrap_database_errors, db.connection.pipeline():
            for statement, params, done in writes:
                cursor = db._prepare_cursor(psycopg.Cursor(db.connection))  # noqa: SLF001
                cursor.execute(statement, params)
                sent.append((cursor, done))
            result = None if then is None else then()
        for cursor, done in sent:
            if done is not None:
                done(cursor)
    finally:
        held.sending = False
        for cursor, _done in sent:
            cursor.close()
    return result


def _lockable(model: Any, related: tuple[str, ...]) -> bool:
    """Whether :func:`locked` writes the read of ``model`` with ``related`` out: each a foreign
    key of the model itself (not a path through another)."""
    for name in related:
        if "__" in name:
            return False
        field = model._meta.get_field(name)
        if not (field.many_to_one and field.concrete):
            return False
    return True


@dataclass(frozen=True)
class Exists:
    """A yes or no read with a locked row, in the same statement (:func:`locked_with_head`):
    whether ``model`` has a row whose ``key`` (its foreign key to the locked row's model) names
    the locked row and whose columns hold the values of ``where``. Set on the locked row as its
    attribute ``name``, as the ORM sets an annotation."""

    name: str
    model: Any
    key: str
    where: tuple[tuple[str, Any], ...] = ()

    def sql(self, model: Any) -> str:
        """The ``EXISTS`` over the row aliased ``m``; its parameters are :attr:`where`'s values."""
        table = self.model._meta.db_table
        key = self.model._meta.get_field(self.key).column
        conditions = [f'e."{key}" = m."{model._meta.pk.column}"']
        conditions += [f'e."{self.model._meta.get_field(n).column}" = %s' for n, _ in self.where]
        return f'EXISTS (SELECT 1 FROM "{table}" e WHERE {" AND ".join(conditions)})'  # noqa: S608 - metadata

    def annotation(self) -> Any:
        """The same as the ORM's annotation."""
        rows = self.model._default_manager.filter(
            **{self.key: models.OuterRef("pk")}, **dict(self.where)
        )
        return {self.name: models.Exists(rows)}


def _fresh_sql(model: Any, alias: str) -> str:
    """Whether the row aliased ``alias``, read under its lock, is the one the statement's own
    snapshot sees (PostgreSQL). In READ COMMITTED, ``SELECT … FOR UPDATE`` that waited for
    another transaction's lock returns the row as that transaction left it, but reads every
    other row of the statement (a joined row, a subquery) from the snapshot taken before it: a
    new version of the locked row (another ``xmin``) says that the rest may be older than it.
    A joined row whose key the other transaction changed is not joined at all then: the row
    is not returned."""
    table, pk = model._meta.db_table, model._meta.pk.column
    return f'(SELECT v.xmin FROM "{table}" v WHERE v."{pk}" = {alias}."{pk}") = {alias}.xmin'  # noqa: S608 - metadata


@functools.cache
def _locked_sql(
    model: Any,
    related: tuple[str, ...],
    head: bool = False,
    also: Any = None,
    exists: Exists | None = None,
) -> str:
    """One row of ``model`` by id with its ``related`` rows, locking only its own row (as the
    ORM's ``select_for_update(of=("self",)).select_related(*related)``: a nullable key's row
    is joined outer). ``head`` (a case): the hash of its last audit event after them; then
    ``exists``'s answer (its values are the first parameters). ``also``: a model whose row by
    id (the parameter after the first row's id) is read and locked too, after the first's, its
    columns next. Last, whether the locked rows are as the statement's snapshot saw them
    (:func:`_fresh_sql`)."""
    selected = [columns(model, "m")]
    joins = []
    for i, name in enumerate(related):
        field = model._meta.get_field(name)
        target = field.related_model
        join = "LEFT JOIN" if field.null else "JOIN"
        selected.append(columns(target, f"r{i}"))
        joins.append(
            f'{join} "{target._meta.db_table}" r{i} '
            f'ON r{i}."{target._meta.pk.column}" = m."{field.column}"'
        )
    if head:
        selected.append(_chain_head_sql().replace("%s", "m.id").join("()"))
    if exists is not None:
        selected.append(exists.sql(model))
    where, of, fresh = f'm."{model._meta.pk.column}" = %s', "m", _fresh_sql(model, "m")
    if also is not None:
        selected.append(columns(also, "x"))
        joins.append(f'CROSS JOIN "{also._meta.db_table}" x')
        where, of = f'{where} AND x."{also._meta.pk.column}" = %s', "m, x"
        fresh = f"{fresh} AND {_fresh_sql(also, 'x')}"
    selected.append(f"({fresh})")
    return (
        f'SELECT {", ".join(selected)} FROM "{model._meta.db_table}" m {" ".join(joins)} '  # noqa: S608 - metadata
        f"WHERE {where} FOR UPDATE OF {of}"
    )


def locked(model: Any, pk: Any, related: tuple[str, ...] = ()) -> Any:
    """``model``'s row ``pk`` read under its row lock, with ``related`` set on it;
    ``model.DoesNotExist`` when there is none: the ORM's
    ``select_for_update(of=("self",)).select_related(*related).get(pk=pk)``. On PostgreSQL,
    for foreign keys of the model itself, one statement written out; otherwise the ORM's."""
    return _locked(model, pk, related, head=False)[0]


def locked_with_head(
    case_model: Any,
    pk: Any,
    related: tuple[str, ...] = (),
    *,
    also: tuple[Any, Any] | None = None,
    exists: Exists | None = None,
) -> tuple[Any, Any, Any]:
    """:func:`locked` for a case, with the hash of its last audit event read in the same
    statement ("" before its first): on PostgreSQL. Elsewhere the head is not read here (None):
    it would be a statement of its own, and the caller's first event reads it when it needs it
    (:func:`chain_head`). ``also``: (model, id) of a row to lock after the case's, read with it
    on PostgreSQL (elsewhere by :func:`locked` next); the third value (None without ``also``).
    ``exists``: an :class:`Exists` answered under the lock, set on the case (elsewhere as the
    ORM's annotation of the locked read)."""
    return _locked(case_model, pk, related, head=True, also=also, exists=exists)


def _locked(
    model: Any,
    pk: Any,
    related: tuple[str, ...],
    *,
    head: bool,
    also: tuple[Any, Any] | None = None,
    exists: Exists | None = None,
) -> tuple[Any, Any, Any]:
    if connection.vendor != "postgresql" or not _lockable(model, related):
        return _locked_by_orm(model, pk, related, also, exists)
    asked = [] if exists is None else [value for _, value in exists.where]
    params = [*asked, pk] if also is None else [*asked, pk, also[1]]
    sql = _locked_sql(model, related, head, None if also is None else also[0], exists)
    values = _read_locked(sql, params)
    if values is None:
        missing = model if also is None else f"{model._meta.object_name} or {also[0]}"
        raise model.DoesNotExist(f"{missing} matching query does not exist.")
    db = current()
    row, at = _loaded_with(model, related, values, db)
    chain = None
    if head:
        chain, at = values[at] or "", at + 1
    if exists is not None:
        setattr(row, exists.name, values[at])
        at += 1
    other = None if also is None else load(also[0], values[at : at + width(also[0])], db)
    return row, chain, other


def _read_locked(sql: str, params: list[Any]) -> Any:
    """The row of :func:`_locked_sql`, read again when what it read is older than the row it
    locked (its last value, :func:`_fresh_sql`) or it read none (a joined row's key changed).
    The first read waits for the lock and takes it (PostgreSQL keeps the lock of a row that a
    recheck then left out), so the second cannot wait and reads it all as now committed. A row
    that is not there is looked for once more: a statement more on a path that raises."""
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        values = cursor.fetchone()
        if values is None or not values[-1]:
            cursor.execute(sql, params)
            values = cursor.fetchone()
    return values


def _locked_by_orm(
    model: Any,
    pk: Any,
    related: tuple[str, ...],
    also: tuple[Any, Any] | None,
    exists: Exists | None,
) -> tuple[Any, Any, Any]:
    """:func:`_locked` through the ORM (other databases, or a related path it does not write
    out): the head is not read (None). On PostgreSQL, read once more as :func:`_read_locked`
    does when the read is older than the row it locked (:func:`_get_locked`)."""
    rows = model._default_manager.select_for_update(of=("self",)).select_related(*related)
    if exists is not None:
        rows = rows.annotate(**exists.annotation())
    row = _get_locked(model, rows, pk) if connection.vendor == "postgresql" else rows.get(pk=pk)
    return row, None, (None if also is None else locked(*also))


def _get_locked(model: Any, rows: Any, pk: Any) -> Any:
    """``rows.get(pk=pk)``, with the read's freshness (:func:`_fresh_sql`) asked as an
    annotation: a stale read or none is made once more, holding the lock."""
    table = f'"{model._meta.db_table}"'  # the ORM's alias of the queried table
    fresh = models.expressions.RawSQL(_fresh_sql(model, table), ())  # noqa: S611 - metadata
    rows = rows.annotate(hf_fresh=fresh)
    row = rows.filter(pk=pk).first()
    if row is None or not row.hf_fresh:
        row = rows.get(pk=pk)
    del row.hf_fresh
    return row


def _loaded_with(model: Any, related: tuple[str, ...], values: Any, db: Any) -> tuple[Any, int]:
    """The row of ``model`` with its ``related`` rows set on it, from the first of ``values``
    (as :func:`_locked_sql` selects them), and where the rest begins."""
    at = width(model)
    row = load(model, values[:at], db)
    for name in related:
        target = model._meta.get_field(name).related_model
        part = values[at : at + width(target)]
        at += width(target)
        setattr(row, name, None if part[0] is None else load(target, part, db))
    return row, at


@functools.cache
def insert_fields(model: Any) -> list[Any]:
    """The fields an INSERT of ``model`` writes (all but the primary key), in column order."""
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def insert_values(instance: Any, db: Any) -> list[Any]:
    """The values of ``instance``'s new row, as Django would write them to ``db``."""
    model: Any = type(instance)
    return [f.get_db_prep_save(f.pre_save(instance, True), db) for f in insert_fields(model)]


@functools.cache
def _insert_sql(model: Any, count: int) -> str:
    fields = insert_fields(model)
    names = ", ".join(f'"{f.column}"' for f in fields)
    row = f"({', '.join(['%s'] * len(fields))})"
    return (
        f'INSERT INTO "{model._meta.db_table}" ({names}) '  # noqa: S608 - model metadata
        f'VALUES {", ".join([row] * count)} RETURNING "{model._meta.pk.column}"'
    )


def insert(instances: list[Any], *, hold: bool = False) -> None:
    """Insert new ``instances`` of one model, in order, and give each its primary key: on
    PostgreSQL one statement written out, elsewhere the ORM's (one row: its ``save``, which
    gives it its key on every database; more: ``bulk_create``).

    ``hold``: inside :func:`writes_held`, the insert may wait for the next statement, and the
    keys arrive with it: for a caller that does not read them before that."""
    if not instances:
        return
    model: Any = type(instances[0])
    if connection.vendor != "postgresql":
        if len(instances) == 1:
            instances[0].save(force_insert=True)
        else:
            model._default_manager.bulk_create(instances)
        return
    db = current()
    params = [value for instance in instances for value in insert_values(instance, db)]
    statement = _insert_sql(model, len(instances))

    def inserted(cursor: Any) -> None:
        ids = [row[0] for row in cursor.fetchall()]
        for instance, pk in zip(instances, ids, strict=True):
            instance.pk = pk
            instance._state.adding, instance._state.db = False, db.alias

    if hold and _hold(db, statement, params, inserted):
        return
    with prepared_cursor() as cursor:
        cursor.execute(statement, params)
        inserted(cursor)


@functools.cache
def _update_sql(model: Any, names: tuple[str, ...]) -> str:
    sets = ", ".join(f'"{model._meta.get_field(name).column}" = %s' for name in names)
    return (
        f'UPDATE "{model._meta.db_table}" SET {sets} '  # noqa: S608 - model metadata
        f'WHERE "{model._meta.pk.column}" = %s'
    )


def save_fields(instance: Any, names: list[str]) -> None:
    """``instance.save(update_fields=names)``: on PostgreSQL one statement written out (each
    field's own ``pre_save`` and conversion, as the ORM's save), elsewhere the ORM's save.
    Raises as the ORM does when no row was updated."""
    if connection.vendor != "postgresql":
        instance.save(update_fields=names)
        return
    model: Any = type(instance)
    db = current()
    ordered = tuple(sorted(set(names)))
    fields = [model._meta.get_field(name) for name in ordered]
    params = [f.get_db_prep_save(f.pre_save(instance, False), db) for f in fields]
    statement, values = _update_sql(model, ordered), [*params, instance.pk]
    if _hold(db, statement, values, _saved_one):
        return
    with prepared_cursor() as cursor:
        cursor.execute(statement, values)
        _saved_one(cursor)


def _saved_one(cursor: Any) -> None:
    if cursor.rowcount != 1:
        raise DatabaseError("Save with update_fields did not affect any rows.")


# The lookups :func:`update` writes out, as SQL operators.
_OPERATORS = {"exact": "=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


def _field(model: Any, name: str) -> Any:
    """``model``'s concrete field by name or attribute name (``case`` or ``case_id``)."""
    if name == "pk":
        return model._meta.pk
    for field in model._meta.concrete_fields:
        if name in (field.name, field.attname):
            return field
    return None


def _condition(model: Any, key: str) -> tuple[Any, str] | None:
    """The field and the lookup of one of :func:`update`'s conditions, or None when it is not
    one this module writes out."""
    name, _, lookup = key.partition("__")
    lookup = lookup or "exact"
    field = _field(model, name)
    if field is None or (lookup not in _OPERATORS and lookup not in ("in", "isnull")):
        return None
    return field, lookup


@functools.cache
def _update_where_sql(
    model: Any, where: tuple[tuple[str, bool | None], ...], names: tuple[str, ...]
) -> str:
    """``where``: each condition's key with, for ``isnull``, its value (the only one written
    into the text); ``names``: the fields set."""
    sets = ", ".join(f'"{_field(model, name).column}" = %s' for name in names)
    conditions = []
    for key, isnull in where:
        field, lookup = _condition(model, key)  # type: ignore[misc]  # checked by the caller
        column = f'"{field.column}"'
        if lookup == "isnull":
            conditions.append(f"{column} IS {'' if isnull else 'NOT '}NULL")
        elif lookup == "in":
            conditions.append(f"{column} = ANY(%s)")
        else:
            conditions.append(f"{column} {_OPERATORS[lookup]} %s")
    return (
        f'UPDATE "{model._meta.db_table}" SET {sets} '  # noqa: S608 - model metadata
        f"WHERE {' AND '.join(conditions)}"
    )


def _plain(value: Any) -> bool:
    """A value written as itself: not an expression the ORM would resolve (``F``, ``Value``)."""
    return not hasattr(value, "resolve_expression")


def _pk_of(value: Any) -> Any:
    """A value as the ORM takes it for a column: a model instance (for a foreign key) is its
    primary key."""
    return value.pk if isinstance(value, models.Model) else value


def update(model: Any, where: dict[str, Any], values: dict[str, Any]) -> int:
    """``model.objects.filter(**where).update(**values)``, the number of rows it updated. On
    PostgreSQL, for conditions on the model's own columns (``exact``, ``in``, ``isnull``,
    ``lt``/``lte``/``gt``/``gte``) and plain values, one statement written out with each
    field's own conversion; anything else goes through the ORM, as on the other databases."""
    written = _update_written(model, where, values)
    if written is None:
        return model._default_manager.filter(**where).update(**values)
    with prepared_cursor() as cursor:
        cursor.execute(*written)
        return cursor.rowcount


def update_unread(model: Any, where: dict[str, Any], values: dict[str, Any]) -> None:
    """:func:`update` for a caller that does not read how many rows it updated: inside
    :func:`writes_held` a written-out one waits for the next statement."""
    written = _update_written(model, where, values)
    if written is None:
        model._default_manager.filter(**where).update(**values)
    elif not _hold(current(), *written, None):
        with prepared_cursor() as cursor:
            cursor.execute(*written)


def _update_written(
    model: Any, where: dict[str, Any], values: dict[str, Any]
) -> tuple[str, list[Any]] | None:
    """:func:`update`'s statement written out and its parameters, or None when it goes through
    the ORM."""
    conditions = [_condition(model, key) for key in where]
    targets = [_field(model, name) for name in values]
    if (
        connection.vendor != "postgresql"
        or not where
        or not values
        or None in conditions
        or any(f is None or f.primary_key for f in targets)
        or not all(_plain(v) for v in (*where.values(), *values.values()))
    ):
        return None
    db = current()
    params = [
        f.get_db_prep_save(_pk_of(v), db) for f, v in zip(targets, values.values(), strict=True)
    ]
    shape: list[tuple[str, bool | None]] = []
    for condition, (key, value) in zip(conditions, where.items(), strict=True):
        field, lookup = condition  # type: ignore[misc]  # None was ruled out above
        if lookup == "exact" and value is None:  # as the ORM: equal to None is IS NULL
            key, lookup, value = f"{key.partition('__')[0]}__isnull", "isnull", True
        if lookup == "isnull":
            shape.append((key, bool(value)))
            continue
        shape.append((key, None))
        if lookup == "in":
            params.append([field.get_db_prep_value(_pk_of(v), db, prepared=False) for v in value])
        else:
            params.append(field.get_db_prep_value(_pk_of(value), db, prepared=False))
    return _update_where_sql(model, tuple(shape), tuple(values)), params


@functools.cache
def _chain_head_sql() -> str:
    """The hash of the case's last audit event: the chain's head."""
    from cases.models import CaseEvent

    return (
        f'SELECT "hash" FROM "{CaseEvent._meta.db_table}" '  # noqa: S608 - model metadata
        'WHERE "case_id" = %s ORDER BY "id" DESC LIMIT 1'
    )


def chain_head(case_id: int) -> str | None:
    """The hash of the case's last audit event (None before its first): the head its next
    event links to. Read under the case's row lock (``cases.kernel.event_row``)."""
    from cases.models import CaseEvent

    if connection.vendor != "postgresql":
        return (
            CaseEvent.objects.filter(case_id=case_id)
            .order_by("-id")
            .values_list("hash", flat=True)
            .first()
        )
    with prepared_cursor() as cursor:
        cursor.execute(_chain_head_sql(), [case_id])
        row = cursor.fetchone()
    return None if row is None else row[0]
