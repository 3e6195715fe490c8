"""A person's side of notifications and follow-ups: the inbox, email preferences, the cases
that are theirs to answer, and the leads' follow-up policies.

The selectors read only what the person may see (their own notifications; cases of their
teams). The services are the one writer of each: reading a notification, a person's email
preferences, a follow-up policy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from cases import selectors
from cases.exceptions import ActionNotPermitted, InvalidCaseInput
from cases.extensions import decisions_of
from cases.held import workers_settling
from cases.models import (
    CaseQuerySet,
    FollowUpPolicy,
    Notification,
    NotificationKind,
    NotificationPreference,
    WaitReason,
)

# --- the inbox -------------------------------------------------------------------------------


def inbox_for(user: Any) -> QuerySet[Notification]:
    """The person's own notifications, newest first (nobody reads another's)."""
    if user is None or not user.is_authenticated:
        return Notification.objects.none()
    return Notification.objects.filter(recipient=user).select_related("case")


def unread_count(user: Any) -> int:
    """How many of the person's notifications are unread: one count on a partial index."""
    if user is None or not user.is_authenticated:
        return 0
    return Notification.objects.filter(recipient=user, read_at__isnull=True).count()


def notifications_mark_read(*, user: Any, ids: Iterable[int] | None = None) -> int:
    """Mark the person's notifications read (``ids``; all of them when None). Another
    person's are never touched. Returns how many were unread."""
    rows = inbox_for(user).filter(read_at__isnull=True)
    if ids is not None:
        rows = rows.filter(pk__in=list(ids))
    return rows.update(read_at=timezone.now())


def notification_open(*, user: Any, notification_id: int) -> str:
    """The person opens one of their notifications: it is read, and its page is where they
    go (a path). ``Notification.DoesNotExist`` for anyone else's."""
    notification = inbox_for(user).get(pk=notification_id)
    if notification.read_at is None:
        Notification.objects.filter(pk=notification.pk, read_at__isnull=True).update(
            read_at=timezone.now()
        )
    return notification.link


# --- email preferences -----------------------------------------------------------------------


def preference_of(user: Any) -> NotificationPreference:
    """The person's preferences (unsaved defaults when they never chose)."""
    pk: Any = getattr(user, "pk", None)
    found = NotificationPreference.objects.filter(user_id=pk).first()
    return found or NotificationPreference(user_id=pk)


def next_digest_at(now: dt.datetime | None = None) -> dt.datetime:
    """The next daily digest time (``NOTIFICATION_DIGEST_HOUR``, local) after ``now``."""
    now = timezone.localtime(now or timezone.now())
    at = now.replace(hour=settings.NOTIFICATION_DIGEST_HOUR, minute=0, second=0, microsecond=0)
    return at if at > now else at + dt.timedelta(days=1)


def preferences_set(
    *, user: Any, email_off: Collection[str], digest: bool
) -> NotificationPreference:
    """A person chooses which kinds of notification are not mailed and whether they get one
    daily digest instead of a mail each. Only their own; notifications already written keep
    the email state they got."""
    if user is None or not user.is_authenticated:
        raise ActionNotPermitted("Sign in to choose your notifications.")
    unknown = sorted(set(email_off) - set(NotificationKind.values))
    if unknown:
        raise InvalidCaseInput(
            "Unknown kind of notification.", fields={"email_off": [", ".join(unknown)]}
        )
    with transaction.atomic():
        preference, _ = NotificationPreference.objects.select_for_update().get_or_create(
            user_id=user.pk
        )
        preference.email_off = sorted(set(email_off))
        if digest and not preference.digest:
            preference.digest_next_at = next_digest_at()
        preference.digest = digest
        preference.save(update_fields=["email_off", "digest", "digest_next_at"])
    return preference


# --- the cases that are mine to answer --------------------------------------------------------


def cases_to_answer(user: Any, cases: CaseQuerySet | None = None) -> CaseQuerySet:
    """ "Mine to answer now": the open cases for which ``user`` is the responsible person now
    and that wait on that person, and the cases whose decision ``user`` may take (the
    approvals' four-eyes rule, ``cases.extensions.decisions_of``). ``cases``: the list to
    narrow (default: the person's teams' cases). A held case the workers are still settling
    by themselves waits on nobody yet (``cases.held``). The home tile counts it; its link
    lists it."""
    cases = cases if cases is not None else selectors.cases_for(user)
    if user is None or not user.is_authenticated:
        return cases.none()
    mine = cases.model.objects.waiting_on_responsible(user).exclude(workers_settling())
    waiting = Q(pk__in=mine.values("pk"))
    decisions = decisions_of(user)
    if decisions is not None:
        waiting |= Q(pk__in=decisions)
    return cases.filter(waiting)


# --- follow-up policies (leads) ---------------------------------------------------------------


def may_edit_policies(user: Any) -> bool:
    return bool(
        user is not None
        and user.is_authenticated
        and user.is_active
        and (user.is_superuser or user.has_perm("cases.change_followuppolicy"))
    )


# The longest follow-up time a policy sets: a year (99,999,999,999 minutes was accepted).
POLICY_MAX_MINUTES = 366 * 24 * 60


def follow_up_policy_errors(
    *, kind: str, reason: str, minutes: int | None, at_risk_percent: int | None
) -> dict[str, list[str]]:
    """What is wrong with a follow-up policy, by field (the admin's form shows them beside
    their fields; the service refuses with them)."""
    from cases import kinds

    errors: dict[str, list[str]] = {}
    if reason not in WaitReason.values:
        errors["reason"] = [f"Unknown reason {reason!r}."]
    if minutes is not None and not 1 <= minutes <= POLICY_MAX_MINUTES:
        errors["minutes"] = [f"From 1 to {POLICY_MAX_MINUTES:,} minutes (a year)."]
    if at_risk_percent is not None and not 0 <= at_risk_percent <= 99:
        errors["at_risk_percent"] = ["From 0 to 99."]
    codes = kinds.codes()
    if kind.strip() and kind.strip() not in codes:
        errors["kind"] = [f"A change kind this desk offers: {', '.join(codes)}; empty: any."]
    return errors


def follow_up_policy_set(
    *, actor: Any, kind: str, reason: str, minutes: int, at_risk_percent: int
) -> FollowUpPolicy:
    """A lead sets how long a wait of ``reason`` (on cases of change kind ``kind``; '' for
    any kind) may take, and its at-risk share. Applies to waits that start from now on."""
    if not may_edit_policies(actor):
        raise ActionNotPermitted("Only leads set follow-up policies.")
    if errors := follow_up_policy_errors(
        kind=kind, reason=reason, minutes=minutes, at_risk_percent=at_risk_percent
    ):
        raise InvalidCaseInput("The policy is not valid.", fields=errors)
    by: Any = actor
    policy, _ = FollowUpPolicy.objects.update_or_create(
        kind=kind.strip(),
        reason=reason,
        defaults={"minutes": minutes, "at_risk_percent": at_risk_percent, "updated_by": by},
    )
    return policy
