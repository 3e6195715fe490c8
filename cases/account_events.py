"""The one writer of account events: the customer account's own audit trail.

Every service that changes an account (``cases.services.account_create``, ``account_verify``,
``account_update``, ``reconciliation.revocation.account_revoke_access``) records what it did
here, in the same transaction, while it holds the account's row lock. The lock is what makes
reading the chain's head and inserting the next link one step (``cases/audit.py``), exactly as
the case's row lock does for case events.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from cases.audit import account_event_hash
from cases.codes import AccountAction
from cases.kernel import Actor, actor_label, user_or_none
from cases.models import AccountEvent, CustomerAccount
from cases.rows import locked


def account_lock(account: CustomerAccount | int) -> CustomerAccount:
    """The account, re-read under its row lock (inside the caller's transaction)."""
    pk = account if isinstance(account, int) else account.pk
    # ``cases.rows.locked``: what it reads with the row is as the lock found it, also after a
    # wait for another change of the account.
    return locked(CustomerAccount, pk, ("team",))


def account_event_record(
    *,
    account: CustomerAccount,
    action: AccountAction,
    actor: Actor,
    reason: str = "",
    detail: dict[str, Any] | None = None,
) -> AccountEvent:
    """Append one event to ``account``'s chain. The caller holds the account's row lock
    (:func:`account_lock`) in the transaction that made the change. ``action`` must be a
    registered ``AccountAction``: any other string raises before anything is written."""
    if not connection.in_atomic_block:
        raise RuntimeError("Account events are written inside the account's locked transaction.")
    code = AccountAction(action).value
    head = (
        AccountEvent.objects.filter(account_id=account.pk)
        .order_by("-id")
        .values_list("hash", flat=True)
        .first()
    )
    user = user_or_none(actor)
    event = AccountEvent(
        account_id=account.pk,
        action=code,
        reason=reason,
        actor=user,
        actor_label=actor_label(actor),
        detail=detail or {},
        created_at=timezone.now(),
        prev_hash=head or "",
    )
    event.hash = account_event_hash(
        account_id=account.pk,
        action=code,
        reason=reason,
        actor_id=user.pk if user is not None else None,
        actor_label=event.actor_label,
        detail=event.detail,
        created_at=event.created_at,
        prev_hash=event.prev_hash,
    )
    event.save(force_insert=True)
    return event
