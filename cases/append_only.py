"""Rows the application adds but never rewrites: the ORM's side of the database guards.

The audit events (``CaseEvent``) are append-only; so are the records a later question depends
on, each in its own measure:

- a proposal's authors (``approvals.ProposalAuthor``): never changed, never deleted;
- an approval (``approvals.Approval``): only its revocation (``revoked_at``,
  ``revoked_reason``) may be written, once, from empty to set; never deleted;
- an apply attempt (``cases.Attempt``): its identity (case, operation, reference, sequence,
  fencing token, claim time, worker, who started it) never changes; its state, lease,
  heartbeat and confirmed steps do; never deleted.

Three layers hold this, as for the events (README, "Database roles and the audit log"): the
application's database role is granted no more (``UPDATE`` only on the columns that may
change, no ``DELETE`` or ``TRUNCATE``); on PostgreSQL a trigger refuses the rest from any
role that cannot act as the table's owner with ``holdfast.maintenance`` set
(``cases/migrations/0021_append_only_attempts.py``, ``approvals/migrations/0006``); and here the
model and its queryset refuse the same writes before they reach the database, which is the
guard SQLite has.

:func:`maintenance` is the owner's deliberate repair (and the tests' way to move a row's clock):
inside it the ORM guards let writes pass and, on PostgreSQL, the transaction sets
``holdfast.maintenance``, which the triggers honour only for the tables' owner.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from django.db import DEFAULT_DB_ALIAS, connections, models, transaction

_maintenance = contextvars.ContextVar("holdfast_maintenance", default=False)


@contextlib.contextmanager
def maintenance(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Let the block rewrite guarded rows: the owner's repair, in one transaction (a savepoint
    when nested). On PostgreSQL the switch is set for the block and put back after it; a block
    that raises rolls back, and the switch with it."""
    token = _maintenance.set(True)
    try:
        with transaction.atomic(using=using):
            postgres = connections[using].vendor == "postgresql"
            if postgres:
                with connections[using].cursor() as cursor:
                    cursor.execute("SELECT current_setting('holdfast.maintenance', true)")
                    (before,) = cursor.fetchone()
                    cursor.execute("SELECT set_config('holdfast.maintenance', 'on', true)")
            yield
            if postgres:
                with connections[using].cursor() as cursor:
                    cursor.execute(
                        "SELECT set_config('holdfast.maintenance', %s, true)", [before or ""]
                    )
    finally:
        _maintenance.reset(token)


def in_maintenance() -> bool:
    """Whether the caller is inside :func:`maintenance`."""
    return _maintenance.get()


def _refuse(model: type[models.Model], what: str) -> None:
    if not _maintenance.get():
        raise PermissionError(f"{model._meta.label}: {what} refused (append-only).")


def _check_columns(model: Any, fields: Iterable[str]) -> None:
    fixed = sorted(set(fields) - set(model.MUTABLE))
    if fixed:
        _refuse(model, f"changing {', '.join(fixed)}")


class GuardedQuerySet(models.QuerySet):
    """``update()`` may write only the model's ``MUTABLE`` columns; ``delete()`` is refused."""

    def update(self, **kwargs: Any) -> int:
        _check_columns(self.model, kwargs)
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        _refuse(self.model, "delete")
        return super().delete()


class GuardedModel(models.Model):
    """A model whose rows are inserted, then only their ``MUTABLE`` columns change (by
    ``save(update_fields=...)`` or the queryset's ``update``); rows are never deleted."""

    MUTABLE: ClassVar[frozenset[str]] = frozenset()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding and not kwargs.get("force_insert"):
            fields = kwargs.get("update_fields")
            if fields is None:
                _refuse(type(self), "saving every column of an existing row")
            else:
                _check_columns(type(self), fields)
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        _refuse(type(self), "delete")
        return super().delete(*args, **kwargs)
