"""Who is told of a case event: notification rows, written with the event that causes them.

``notifications_for(case, event)`` is called by the kernel for every audit event it records
(``cases.kernel.record_event``), inside the event's own transaction and under the case's row
lock, so a notification exists exactly when its event does: a rolled-back step leaves none, a
retry of the step writes its event (and its notifications) once. One row per event and
recipient (a unique constraint).

Who hears what (DESIGN.md "People are told"):

- A proposal starts to await review (submitted, or back after an expiry): the approvers who
  may decide it, by approvals' four-eyes rule (``cases.extensions.case_deciders``). Back in
  review from a hold that interrupted its review (restore recovery proved nothing was sent),
  the same proposal awaits the same decision: whoever was told of it already is not told again.
- The case needs attention or its proposal is rejected: the person responsible now, the owner
  or the named backup while the owner is away.
- The case is held, when it becomes that person's (``cases.held``), once per hold: on arriving
  held if the workers are not settling it by themselves, or when the workers give up on it
  (their checks ran out, or they may no longer settle its kind). While the workers are still
  settling it, nobody is told.
- Its follow-up time passes (``cases.reminders``): the person responsible now, and the
  approvers who may decide when the wait is theirs.
- Its owner goes away while it waits on them (their answer, or a held case only a person
  settles): the named backup, who is responsible now. A case that waits on nobody's answer
  tells nobody: it reaches the backup by the rules above when it needs them.
- It is done or cancelled: the staff member who opened it (``Case.opened_by``). A case that an
  integration or the system opened tells nobody: its caller reads the outcome from the API,
  and a closed case needs no person.

Nobody is told of their own action. An event that notifies nobody costs no query: the rule is
read from the event and the case row already in hand (the apply's hot path).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from cases import validation
from cases.codes import Action
from cases.extensions import case_deciders, case_decision_path
from cases.held import held_waits_on_person
from cases.models import (
    Case,
    CaseEvent,
    Notification,
    NotificationKind,
    NotificationPreference,
    Status,
    WaitingOn,
)

# The workers give up on a held case: their checks ran out, or they may not settle its kind.
_HELD_GIVE_UPS = frozenset({Action.RETRIES_EXHAUSTED, Action.MANUAL_SETTLEMENT_NEEDED})

# A status a transition arrives at, and the notification it makes.
_ARRIVALS: dict[str, NotificationKind] = {
    Status.AWAITING_REVIEW: NotificationKind.AWAITING_REVIEW,
    Status.HELD: NotificationKind.HELD,
    Status.NEEDS_ATTENTION: NotificationKind.NEEDS_ATTENTION,
    Status.PROPOSAL_REJECTED: NotificationKind.REJECTED,
    Status.DONE: NotificationKind.DONE,
    Status.CANCELLED: NotificationKind.CANCELLED,
}


def notification_kind(event: CaseEvent) -> NotificationKind | None:
    """The notification ``event`` makes, or None (from the event alone: no query)."""
    if event.action == Action.FOLLOW_UP_DUE:
        return NotificationKind.FOLLOW_UP_DUE
    if event.action == Action.CASE_RESPONSIBILITY_TO_BACKUP:
        return NotificationKind.HANDED_OVER
    if event.action == Action.CASE_REASSIGNED:
        return NotificationKind.ASSIGNED
    if event.action in _HELD_GIVE_UPS:
        return NotificationKind.HELD  # the workers gave up on a held case
    if event.action != Action.CASE_TRANSITIONED or event.from_status == event.to_status:
        return None
    return _ARRIVALS.get(event.to_status)


def _held_becomes_persons(case: Case, event: CaseEvent) -> bool:
    """A held case is the responsible person's to be told of when it waits on a person
    (``cases.held``: not while the workers are still settling it), once per hold: on arriving
    held, or when the workers give up on it if its person was not told on arrival."""
    if not held_waits_on_person(case):
        return False
    if event.action not in _HELD_GIVE_UPS:
        return True
    arrived = (
        CaseEvent.objects.filter(case=case, action=Action.CASE_TRANSITIONED, to_status=Status.HELD)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )
    told = Notification.objects.filter(case=case, kind=NotificationKind.HELD)
    return not told.filter(event_id__gte=arrived or 0).exists()


def _waits_on_its_person(case: Case) -> bool:
    """``case`` waits on the person responsible for it: their answer, or a held case that only
    a person settles now."""
    return case.waiting_on == WaitingOn.OWNER or held_waits_on_person(case)


def _responsibility_moved(case: Case, event: CaseEvent) -> bool:
    """A reassignment (``event``'s ``before`` and ``after`` usernames) made someone else the
    person responsible now: the owner, or the backup while the owner is away."""
    before = event.detail.get("before") or {}
    was = before.get("backup") if case.owner_is_away and before.get("backup") else None
    return case.responsible_now.get_username() != (was or before.get("owner"))


def case_path(case: Case) -> str:
    return reverse("admin:cases_case_change", args=[case.pk])


def _responsible(case: Case) -> list[User]:
    return [case.responsible_now]


def _recipients(case: Case, kind: NotificationKind) -> list[User]:
    if kind == NotificationKind.AWAITING_REVIEW:
        return list(case_deciders(case) or [])  # type: ignore[arg-type]
    if kind in (NotificationKind.DONE, NotificationKind.CANCELLED):
        return [case.opened_by] if case.opened_by_id is not None and case.opened_by else []
    people = _responsible(case)
    if kind == NotificationKind.FOLLOW_UP_DUE and case.waiting_on == WaitingOn.APPROVERS:
        people += list(case_deciders(case) or [])  # type: ignore[arg-type]
    return people


_WORDS: dict[NotificationKind, str] = {
    NotificationKind.AWAITING_REVIEW: "{case}: a proposal awaits your decision",
    NotificationKind.HELD: "{case} is held: reconcile it from the order system's evidence",
    NotificationKind.NEEDS_ATTENTION: "{case} needs attention: a person decides what happens next",
    NotificationKind.REJECTED: "{case}: the proposal was rejected; prepare another proposal",
    NotificationKind.FOLLOW_UP_DUE: "{case}: its follow-up time has passed",
    NotificationKind.DONE: "{case}, which you opened, is done",
    NotificationKind.CANCELLED: "{case}, which you opened, is cancelled",
    NotificationKind.HANDED_OVER: "{case} waits on you now: its owner is away",
    NotificationKind.ASSIGNED: "{case} waits on you now: it was assigned to you",
}


def notification_text(case: Case, kind: NotificationKind, event: CaseEvent) -> str:
    text = _WORDS[kind].format(case=case.reference)
    if event.reason and kind != NotificationKind.AWAITING_REVIEW:
        text = f"{text} ({event.reason})"
    return validation.cut_at_word(text, Notification._meta.get_field("text").max_length or 300)


def _email_state(
    person: User, kind: NotificationKind, preference: NotificationPreference | None
) -> str:
    if preference is not None and kind in (preference.email_off or []):
        return Notification.Email.OFF
    if not person.email:
        return Notification.Email.NO_ADDRESS
    if preference is not None and preference.digest:
        return Notification.Email.DIGEST
    return Notification.Email.PENDING


def notifications_for(case: Case, event: CaseEvent) -> list[Notification]:
    """The notifications ``event`` makes, unsaved (the kernel inserts them once the event has
    its id): one per person told, never the event's own actor, each with its email's state
    from the person's preferences."""
    kind = notification_kind(event)
    if kind is None:
        return []
    if kind == NotificationKind.HELD and not _held_becomes_persons(case, event):
        return []
    if kind == NotificationKind.HANDED_OVER and not _waits_on_its_person(case):
        return []
    if kind == NotificationKind.ASSIGNED and not (
        _waits_on_its_person(case) and _responsibility_moved(case, event)
    ):
        return []
    people = _unique_active(_recipients(case, kind), actor_id=event.actor_id)
    if not people:
        return []
    link = case_path(case)
    if kind == NotificationKind.AWAITING_REVIEW:
        link = case_decision_path(case) or link
        told = _told_of_the_review_a_hold_interrupted(case, event, people, link)
        people = [p for p in people if p.pk not in told]
        if not people:
            return []
    preferences = {
        p.user_id: p for p in NotificationPreference.objects.filter(user__in=[p.pk for p in people])
    }
    now = timezone.now()
    rows = []
    for person in people:
        state = _email_state(person, kind, preferences.get(person.pk))
        rows.append(
            Notification(
                recipient=person,
                case=case,
                event=event,
                kind=kind,
                text=notification_text(case, kind, event),
                link=link,
                created_at=now,
                email_state=state,
                email_due_at=now if state == Notification.Email.PENDING else None,
            )
        )
    return rows


def _told_of_the_review_a_hold_interrupted(
    case: Case, event: CaseEvent, people: list[User], link: str
) -> set[int]:
    """Who was told already of the review ``event`` returns to, by id: a case back in review
    from a hold it entered while in review awaits the decision it awaited before, on the same
    proposal (its decision page is the notification's link). A restore drill against a running
    desk told the approver twice of each proposal in review."""
    if event.from_status != Status.HELD:
        return set()
    held_from = (
        CaseEvent.objects.filter(case=case, action=Action.CASE_TRANSITIONED, to_status=Status.HELD)
        .order_by("-pk")
        .values_list("from_status", flat=True)
        .first()
    )
    if held_from != Status.AWAITING_REVIEW:
        return set()
    return set(
        Notification.objects.filter(
            case=case,
            kind=NotificationKind.AWAITING_REVIEW,
            link=link,
            recipient__in=[p.pk for p in people],
        ).values_list("recipient_id", flat=True)
    )


def _unique_active(people: Iterable[User | None], *, actor_id: int | None) -> list[User]:
    seen: dict[int, User] = {}
    for person in people:
        if person is None or not person.is_active or person.pk == actor_id:
            continue
        seen.setdefault(person.pk, person)
    return list(seen.values())
