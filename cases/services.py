"""The kernel's use cases: what people, integrations and workers do to a case.

Each public function is keyword-only and makes its change as kernel steps
(``cases.kernel.case_step``): one transaction that locks the case row, checks the actor's
permission explicitly (django-fsm-2 does not enforce ``permission=``) and the expected version,
applies the transition, bumps ``version`` and writes exactly one ``CaseEvent`` per bump.
Follow-up work is scheduled with ``transaction.on_commit``, never inside the transaction.

This is not the only code that writes cases: ``cases.retention`` and the apps above the kernel
(``approvals``, ``reconciliation``) write them too. All of them write through the primitives of
``cases.kernel`` (lock, check, transition, bump, audit), which is what keeps those invariants
wherever the write happens.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_fsm import can_proceed

from cases import kinds, selectors, validation
from cases.account_events import account_event_record, account_lock
from cases.attempts import attempts_request_stop
from cases.codes import AccountAction, Action
from cases.exceptions import (
    ActionNotPermitted,
    InvalidCaseInput,
    OpenCaseExists,
    TransitionRejected,
)
from cases.extensions import before_evidence_replaced, on_case_opened, on_request_joined
from cases.followups import follow_up_refresh
from cases.kernel import (
    KEEP,
    Actor,
    Keep,
    Worker,
    actor_label,
    allowed_now,
    apply_transition,
    bump_and_save,
    case_step,
    check_version,
    lock_case,
    record_event,
    record_fact,
    user_or_none,
)
from cases.models import (
    CancellationRequest,
    Case,
    CustomerAccount,
    EvidenceReference,
    Status,
    Team,
    WaitingOn,
)
from cases.references import case_number_next
from cases.retries import retries_reset
from cases.rows import Exists, insert, update
from cases.scheduling import enqueue_on_commit

# --- transitions ------------------------------------------------------------------------------

MANUAL_TRANSITIONS = ("request_source_check", "requeue", "escalate", "cancel", "stop")


def transition_meta(name: str) -> dict[str, Any]:
    method = getattr(Case, name, None)
    meta = getattr(method, "_django_fsm", None)
    if meta is None:
        raise TransitionRejected(f"{name!r} is not a case transition.", allowed=[])
    any_transition = next(iter(meta.transitions.values()))
    return {"permission": any_transition.permission, "custom": any_transition.custom}


def case_transition(
    *, case: Case, transition: str, expected_version: int, reason: str, actor: Actor
) -> Case:
    """A person or an integration moves a case by hand, having seen ``expected_version``."""
    if transition not in MANUAL_TRANSITIONS:
        raise TransitionRejected(
            f"'{transition}' cannot be requested by hand; the workflow drives it.",
            allowed=allowed_now(case, actor),
        )
    if not reason.strip():
        raise InvalidCaseInput("Give a reason.", fields={"reason": ["A reason is required."]})
    validation.ensure_valid(
        reason=validation.text_errors(reason, max_length=validation.REASON_MAX_LENGTH)
    )
    if transition == "cancel":
        fresh = Case.objects.get(pk=case.pk)
        if fresh.is_terminal:
            check_version(fresh, expected_version)
            raise TransitionRejected(
                f"{fresh.reference} is {fresh.get_status_display().lower()}: nothing to cancel.",
                allowed=[],
            )
        return case_cancel_request(
            case=case,
            actor=actor,
            reason=reason,
            via="transition",
            expected_version=expected_version,
        )
    with case_step(
        case,
        actor=actor,
        permission=transition_meta(transition)["permission"],
        what=f"'{transition}'",
        expected_version=expected_version,
    ) as case:
        if transition == "request_source_check":
            # The order is read again: whatever rests on the evidence about to be replaced
            # (approvals: the open proposal) is withdrawn here, under this lock.
            before_evidence_replaced(case, f"Source re-check requested: {reason.strip()}")
        due_now = transition in {"request_source_check", "requeue"}
        next_check = timezone.now() if due_now else KEEP
        # A person asked for a fresh read: the bounded count of failed checks starts again.
        restart: dict[str, Any] = (
            retries_reset(case, "source_check") if transition == "request_source_check" else {}
        )
        apply_transition(
            case,
            transition,
            actor=actor,
            reason=reason.strip(),
            next_check_at=next_check,
            **restart,
        )
    return case


# --- intake -----------------------------------------------------------------------------------

# The account of the failure drills' cases (``manage.py drill``): never a customer's.
DRILL_ACCOUNT = "ACC-DRILL"


def _may_open(actor: Actor, account: CustomerAccount) -> bool:
    """Workers open cases for the system; a person needs ``add_case`` in the account's team."""
    team = account.team
    return (
        isinstance(actor, Worker)
        or actor.is_superuser
        or (actor.has_perm("cases.add_case") and team.members.filter(pk=actor.pk).exists())
    )


def actor_may_open_cases(actor: Actor) -> bool:
    """Whether ``actor`` may open cases for any account at all (the admin's intake link)."""
    return isinstance(actor, Worker) or (
        actor.is_active and (actor.is_superuser or actor.has_perm("cases.add_case"))
    )


def open_case_for(*, account: CustomerAccount, order_id: str, kind: str) -> Case | None:
    """The open case of ``account`` for ``kind`` of change to ``order_id``, if any."""
    return Case.objects.open().filter(account=account, order_id=order_id, kind=kind).first()


def _open_case_exists(case: Case) -> OpenCaseExists:
    return OpenCaseExists(
        f"Order {case.order_id} already has an open {kinds.label_of(case.kind).lower()} case, "
        f"{case.reference} ({case.get_status_display().lower()}): one open case per order and "
        "kind of change. Work that case, or cancel it first.",
        reference=case.reference,
    )


def case_open(
    *,
    actor: Actor,
    account: CustomerAccount,
    request_key: str,
    order_id: str,
    kind: str,
    change: dict[str, Any],
    note: str = "",
    drill: bool = False,
) -> tuple[Case, bool]:
    """Open a case asking for one ``change`` of one ``kind`` to one order, or return the case
    this request key already opened (``created`` False).

    - The same ``account`` + ``request_key`` never yields a second case, even when two intakes
      race: the unique constraint decides and the loser returns the winner's case. A person
      who re-sends another person's request gets that case back and is recorded as one of its
      authors (``cases.case.request_joined``): four eyes binds whoever asked for a change,
      however they asked, so they may never approve it.
    - One open case per account, order and kind (``case_one_open_per_order_kind``): another
      request for the same kind of change to an order with an open case is refused with
      ``OpenCaseExists`` naming it. Different kinds on one order may be open together.
    - ``change`` is validated by its kind (``cases.kinds``) and stored in canonical form.

    ``drill=True`` (only ``manage.py drill`` passes it) opens a drill case: it must be on a
    sandbox order and for the drill account (``DRILL_ACCOUNT``); every other intake refuses
    sandbox orders.
    """
    team = account.team
    if not _may_open(actor, account):
        raise ActionNotPermitted(f"{actor_label(actor)} may not open cases for {team}.")
    validation.ensure_valid(
        # Safe identifiers only: an order id travels into the order system's paths.
        request_key=validation.identifier_errors(request_key),
        order_id=validation.identifier_errors(order_id),
        note=validation.text_errors(note, max_length=validation.NOTE_MAX_LENGTH),
        kind=[] if kind in kinds.codes() else [f"One of {', '.join(kinds.codes())}."],
    )
    # The capability probe really changes its sandbox orders: no case may ever refer to one.
    reserved = {order.casefold() for order in settings.ORDER_SYSTEM_SANDBOX_ORDERS}
    sandbox = order_id.strip().casefold() in reserved
    if drill and not (sandbox and account.reference == DRILL_ACCOUNT):
        raise InvalidCaseInput(
            f"A drill case needs a sandbox order and account {DRILL_ACCOUNT}.",
            fields={"order_id": ["Drill cases run on sandbox orders of the drill account."]},
        )
    if not drill and sandbox:
        raise InvalidCaseInput(
            f"Order {order_id} is reserved for the order-system probe.",
            fields={"order_id": ["This order is reserved for the order-system probe."]},
        )
    existing = Case.objects.filter(account=account, request_key=request_key).first()
    if existing is not None:
        return _request_resent(existing, actor), False
    # Checked after the lookup: a re-sent intake finds its case even once its date has passed.
    validation.ensure_valid(**kinds.validate(kind, change))
    change = kinds.get(kind).canonical(change)
    if team.default_owner_id is None:
        raise InvalidCaseInput(
            f"Team {team} has no default owner to take the case.",
            fields={"account": [f"Team {team} has no support lead to own new cases."]},
        )
    if (open_case := open_case_for(account=account, order_id=order_id, kind=kind)) is not None:
        if open_case.request_key == request_key:
            # The same request, opened by a racing intake since the lookup above.
            return _request_resent(open_case, actor), False
        raise _open_case_exists(open_case)
    try:
        with transaction.atomic():
            # Decided on the account under its lock, as its verification and its loss of
            # access change it (``account_lock``): each then waits for this intake and finds
            # its case, or this intake waits and reads what it left. The caller's copy may be
            # from before either, and neither would have found a case it did not see.
            account = account_lock(account)
            if not account.access_active:
                # Admission of new work takes the lock the loss of access takes: once it
                # came first, the request is refused and nothing is written (DESIGN,
                # "Revoking a context").
                raise _no_access(account)
            # The team's own prefix and counter (cases.references).
            number, reference = case_number_next(team)
            case = Case(
                reference=reference,
                number=number,
                account=account,
                request_key=request_key,
                order_id=order_id,
                kind=kind,
                change=change,
                note=note,
                team=team,
                owner_id=team.default_owner_id,
                backup_id=_default_backup_id(team),
                waiting_on=WaitingOn.OWNER,
                waiting_reason="New request: the account must be verified",
                opened_by=_staff_member(actor),
            )
            # Waiting for the account's verification: the responsible person's clock starts.
            follow_up_refresh(case)
            case.save(force_insert=True)
            # Inserted just now, in this transaction: no event yet, and none can be chained
            # before these (the row is seen by nobody else until it commits).
            created = record_event(
                head="",
                case=case,
                action=Action.CASE_CREATED,
                actor=actor,
                reason="Customer request received",
                to_status=case.status,
                detail={
                    "request_key": request_key,
                    "order_id": order_id,
                    "change": kinds.audit_detail(change),
                },
            )
            if can_proceed(case.request_source_check):
                apply_transition(
                    case,
                    "request_source_check",
                    actor=actor,
                    reason="Verified account: read the order before proposing anything",
                    next_check_at=timezone.now(),
                    head=created.hash,
                )
                enqueue_on_commit("reconciliation.tasks.source_check", case.pk)
            # Once it has committed: what the upper apps keep about its order learns of it.
            # Robust: the case is opened whatever they do (an error of theirs is logged).
            transaction.on_commit(lambda: on_case_opened(case), robust=True)
    except IntegrityError:
        existing = Case.objects.filter(account=account, request_key=request_key).first()
        if existing is not None:
            return _request_resent(existing, actor), False
        open_case = open_case_for(account=account, order_id=order_id, kind=kind)
        if open_case is None:
            raise
        raise _open_case_exists(open_case) from None
    return case, True


def _no_access(account: CustomerAccount) -> InvalidCaseInput:
    revoked = account.access_revoked_at
    when = "" if revoked is None else f" on {timezone.localtime(revoked):%Y-%m-%d}"
    why = f"{account.reference} lost access{when}: no new request is taken for it."
    return InvalidCaseInput(why, fields={"account": [why]})


def _default_backup_id(team: Team) -> int | None:
    """The backup of the team's new cases: its default backup, unless that is its default
    owner too (the team form refuses it; a team saved that way before, or outside the form,
    gets cases without a backup rather than a refused intake: a case's backup is never its
    owner, ``case_backup_is_not_owner``)."""
    if team.default_backup_id == team.default_owner_id:
        return None
    return team.default_backup_id


def _staff_member(actor: Actor):
    """The person who opens a case, when they work in the desk (and so read its inbox): a
    worker, the system or an integration's API user opens it for nobody to be told."""
    person = user_or_none(actor)
    return person if person is not None and person.is_staff else None


def _request_resent(case: Case, actor: Actor) -> Case:
    """The case a re-sent request found. A person who had not asked for it before (opened it
    or re-sent it) joins it: recorded on its trail, and an author of its intent from then on
    (``approvals`` reads the event), so four eyes holds however they asked."""
    if isinstance(actor, Worker):
        return case
    asked = case.events.filter(
        action__in=[Action.CASE_CREATED, Action.CASE_REQUEST_JOINED], actor=actor
    )
    if asked.exists():
        return case
    with case_step(case, actor=actor) as locked:
        if not locked.events.filter(
            action__in=[Action.CASE_CREATED, Action.CASE_REQUEST_JOINED], actor=actor
        ).exists():
            record_fact(
                case=locked,
                action=Action.CASE_REQUEST_JOINED,
                actor=actor,
                reason=f"{actor_label(actor)} re-sent request {locked.request_key}: an author "
                "of this change, who may not approve it",
                detail={"request_key": locked.request_key},
            )
            on_request_joined(locked)
    return Case.objects.get(pk=case.pk)


def resent_differences(
    case: Case, *, order_id: str, kind: str, change: Mapping[str, Any], note: str = ""
) -> list[str]:
    """The fields in which a request re-sent with ``case``'s request key differs from the
    request that opened it: ``order_id``, ``kind``, ``change``, ``note``. ``case_open`` keeps
    the first request whatever the second says (the key names one request); the caller says so
    to whoever sent it, so that a second, different request is not taken for done."""
    differ = []
    if order_id != case.order_id:
        differ.append("order_id")
    if kind != case.kind:
        differ += ["kind", "change"]
    else:
        try:
            sent = kinds.get(kind).canonical(change)
        except (KeyError, TypeError, ValueError, AttributeError):
            sent = None  # not even a change of its kind: not the case's
        if sent != case.change:
            differ.append("change")
    if note != case.note:
        differ.append("note")
    return differ


# --- ownership and follow-up ----------------------------------------------------------------


def case_assign(
    *, case: Case, expected_version: int, owner, backup, reason: str, actor: Actor
) -> Case:
    """Hand the case to an owner and a named backup, both members of the case's team."""
    with case_step(
        case,
        actor=actor,
        permission="cases.lead_case",
        what="reassign the case",
        expected_version=expected_version,
    ) as case:
        errors: dict[str, list[str]] = {}
        members, workers = case.team.members, selectors.case_workers(case.team)
        for name, person in (("owner", owner), ("backup", backup)):
            if person is None:
                continue
            if not members.filter(pk=person.pk).exists():
                errors[name] = [f"{person} is not a member of {case.team}."]
            elif not workers.filter(pk=person.pk).exists():
                # An auditor or an approver only could answer nothing the case asks.
                errors[name] = [f"{person} may not work cases: choose an agent or a lead."]
        if backup is not None and backup.pk == owner.pk:
            errors["backup"] = ["The backup must be someone other than the owner."]
        if errors:
            raise InvalidCaseInput("The assignment is not valid.", fields=errors)
        before = {"owner": case.owner.get_username(), "backup": _name(case.backup)}
        case.owner, case.backup = owner, backup
        bump_and_save(case, ["owner", "backup"])
        record_event(
            case=case,
            action=Action.CASE_REASSIGNED,
            actor=actor,
            reason=reason or "Reassigned",
            detail={
                "before": before,
                "after": {"owner": owner.get_username(), "backup": _name(backup)},
            },
        )
    return case


def _name(user) -> str | None:
    return user.get_username() if user is not None else None


def case_update_followup(
    *,
    case: Case,
    expected_version: int,
    actor: Actor,
    outstanding_question: str | None = None,
    next_check_at: dt.datetime | None | Keep = KEEP,
    reason: str = "",
) -> Case:
    """Record what the case is waiting to learn and when to look at it again
    (``next_check_at``: ``KEEP`` leaves it alone, ``None`` clears it)."""
    validation.ensure_valid(
        outstanding_question=validation.text_errors(
            outstanding_question or "", max_length=validation.REASON_MAX_LENGTH
        ),
        reason=validation.text_errors(reason, max_length=validation.REASON_MAX_LENGTH),
    )
    with case_step(
        case,
        actor=actor,
        permission="cases.work_case",
        what="update the follow-up",
        expected_version=expected_version,
    ) as case:
        changed: dict[str, Any] = {}
        if outstanding_question is not None and outstanding_question != case.outstanding_question:
            changed["outstanding_question"] = outstanding_question
        if not isinstance(next_check_at, Keep) and next_check_at != case.next_check_at:
            changed["next_check_at"] = next_check_at
        if not changed:
            return case
        for field, value in changed.items():
            setattr(case, field, value)
        bump_and_save(case, list(changed))
        record_event(
            case=case,
            action=Action.CASE_FOLLOWUP_UPDATED,
            actor=actor,
            reason=reason or "Follow-up updated",
            detail={
                k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in changed.items()
            },
        )
    return case


# --- evidence ----------------------------------------------------------------------------------


def evidence_add(
    *,
    case: Case,
    actor: Actor,
    source_system: str,
    external_reference: str,
    kind: str,
    permitted_basis: str,
    summary: str,
    captured_at: dt.datetime | None = None,
    order_version: int | None = None,
) -> EvidenceReference:
    """Attach a reference to permitted evidence to a case locked by the caller (no version bump).

    Services that record evidence as part of a transition call this inside their transaction.
    Inside ``cases.rows.writes_held`` the reference's id comes with the next statement.
    """
    evidence = EvidenceReference(
        case=case,
        source_system=source_system,
        external_reference=external_reference,
        kind=kind,
        permitted_basis=permitted_basis,
        summary=summary[:280],
        captured_at=captured_at or timezone.now(),
        order_version=order_version,
        recorded_by=actor_label(actor),
    )
    insert([evidence], hold=True)  # a worker records one at every confirmed apply: written out
    return evidence


def evidence_record(
    *, case: Case, expected_version: int | None, actor: Actor, **reference: Any
) -> EvidenceReference:
    """A person records a reference to evidence; the case version moves and is audited."""
    validation.ensure_valid(
        external_reference=validation.key_errors(
            reference.get("external_reference", ""), max_length=200
        ),
        kind=validation.key_errors(reference.get("kind", ""), max_length=60),
        summary=validation.text_errors(reference.get("summary", ""), max_length=280, required=True),
        order_version=validation.order_version_errors(reference.get("order_version")),
    )
    with case_step(
        case,
        actor=actor,
        permission="cases.add_evidencereference",
        what="record evidence",
        expected_version=expected_version,
    ) as case:
        evidence = evidence_add(case=case, actor=actor, **reference)
        bump_and_save(case, [])
        record_event(
            case=case,
            action=Action.EVIDENCE_RECORDED,
            actor=actor,
            reason=evidence.summary,
            detail={
                "evidence_id": evidence.pk,
                "source_system": evidence.source_system,
                "external_reference": evidence.external_reference,
            },
        )
    return evidence


# --- people ------------------------------------------------------------------------------------


def actor_may_set_away(*, actor: Actor, user) -> bool:
    """Anyone may mark themselves away; a lead may mark the members of their teams."""
    from cases.models import Team

    return (
        isinstance(actor, Worker)
        or actor.pk == user.pk
        or actor.is_superuser
        or (
            actor.has_perm("cases.lead_case")
            and Team.objects.filter(members=actor).filter(members=user).exists()
        )
    )


# An absence ends within this many days: longer is a reassignment, not an absence.
MAX_ABSENCE_DAYS = 366


def absence_end_error(away_until: dt.date | None) -> str:
    """Why an absence may not end on ``away_until`` ('' when it may; None: not away)."""
    if away_until is None:
        return ""
    today = timezone.localdate()
    if away_until < today:
        return "An absence ends today or later."
    latest = today + dt.timedelta(days=MAX_ABSENCE_DAYS)
    if away_until > latest:
        # 9999-12-31 hands every case to the backup for good: that is a reassignment.
        return (
            f"An absence ends within a year (by {latest:%Y-%m-%d}); for longer, reassign the "
            "person's cases."
        )
    return ""


def staff_set_away(*, user, away_until: dt.date | None, actor: Actor) -> None:
    """Mark a person away until a date (inclusive); their cases fall to their backups, and each
    of their open cases records the hand-over (and the return) on its timeline."""
    from cases.models import StaffProfile

    # Who may first: someone who may not is told that, not that the date is wrong.
    if not actor_may_set_away(actor=actor, user=user):
        raise ActionNotPermitted(f"{actor_label(actor)} may not change {user}'s absence.")
    if why := absence_end_error(away_until):
        raise InvalidCaseInput(why, fields={"away_until": [why]})
    with transaction.atomic():
        profile, _ = StaffProfile.objects.select_for_update().get_or_create(user=user)
        was_away = profile.is_away()
        profile.away_until = away_until
        profile.save(update_fields=["away_until"])
        if profile.is_away() == was_away:
            return
        # Responsibility for each open case this person owns changes hands: say so on the case.
        owned = Case.objects.open().filter(owner=user, backup__isnull=False)
        for pk in owned.values_list("pk", flat=True):
            case = lock_case(pk)
            if case.owner_id != user.pk or case.backup_id is None or case.is_terminal:
                # Handed over, left without a backup or closed since the list was read: the
                # hand-over is not this person's to record here.
                continue
            if profile.is_away():
                reason = (
                    f"Responsibility passes to {_full_name(case.backup)}, the named backup, "
                    f"while {_full_name(user)} is away until {away_until:%Y-%m-%d}"
                )
                action = Action.CASE_RESPONSIBILITY_TO_BACKUP
            else:
                reason = f"{_full_name(user)} is back: responsibility returns to the owner"
                action = Action.CASE_RESPONSIBILITY_TO_OWNER
            record_fact(
                case=case,
                action=action,
                actor=actor,
                reason=reason,
                detail={
                    "owner": user.get_username(),
                    "backup": _name(case.backup),
                    "away_until": away_until.isoformat() if away_until else None,
                },
            )


def _full_name(user) -> str:
    return user.get_full_name() or user.get_username()


# --- cancellation ------------------------------------------------------------------------------


# Checks that run, outside any transaction, before a decision treats a ready case's change as
# never sent (a cancellation, an approval's expiry). Restored records may lack an apply the
# order system holds; apps above the kernel register the check that can tell (reconciliation:
# restore detection from the order system), so the kernel imports none of them.
UNSENT_DECISION_CHECKS: list = []


def unsent_decision_check(case: Case) -> None:
    """Run the registered checks for a ready case (one whose change could have been sent after
    a backup was taken); they may hold it for recovery before the decision is made."""
    if case.status != Status.READY:
        return
    for check in UNSENT_DECISION_CHECKS:
        check(case)


def case_cancel_request(
    *, case: Case, actor: Actor, reason: str, via: str, expected_version: int | None = None
) -> Case:
    """Record a request to cancel and honour it only as far as the evidence allows.

    Before anything can have been sent, the case is cancelled at once (a claim racing this is
    serialised by the row lock and the status check: exactly one wins). Once a worker may have
    sent the change, the request is saved and the case is held for reconciliation: a
    cancellation never hides a change that may already be applied. A cancellation of a done
    case is recorded as refused and answered with ``TransitionRejected`` (409).
    """
    if not reason.strip():
        raise InvalidCaseInput("Give a reason.", fields={"reason": ["A reason is required."]})
    validation.ensure_valid(
        reason=validation.text_errors(reason, max_length=validation.REASON_MAX_LENGTH)
    )
    unsent_decision_check(Case.objects.get(pk=case.pk))
    with case_step(
        case,
        actor=actor,
        permission="cases.work_case",
        what="cancel the case",
        expected_version=expected_version,
    ) as case:
        refused = _cancel_under_lock(case, actor, reason, via)
    if refused is not None:
        raise refused  # after the commit: the refused request stays on record
    return case


def _cancel_under_lock(
    case: Case, actor: Actor, reason: str, via: str
) -> TransitionRejected | None:
    """``case_cancel_request`` inside its step, on the locked and checked case: the refusal
    to raise once the transaction has committed (a refused request is recorded, not rolled
    back), or None."""
    from cases.models import CancellationRequest

    if case.status in {Status.CANCELLED, Status.STOPPED}:
        return None
    if case.status == Status.DONE:
        return _cancellation_refused(case, actor, reason, via)
    request = CancellationRequest.objects.create(
        case=case,
        reason=reason.strip(),
        via=via,
        requested_by=user_or_none(actor),
        requested_by_label=actor_label(actor),
    )
    if not case.nothing_applied():
        # The change is already confirmed; only the steps after it (notify, close) remain.
        note = (
            "Cancellation arrived after the change: the change is applied. Reversing it is "
            "a new proposal that needs its own approval."
        )
        request.outcome = CancellationRequest.Outcome.ARRIVED_AFTER_CHANGE
        request.settled_at = timezone.now()
        request.save(update_fields=["outcome", "settled_at"])
        case.outstanding_question = note
        bump_and_save(case, ["outstanding_question"])
        record_event(
            case=case,
            action=Action.CANCELLATION_AFTER_CHANGE,
            actor=actor,
            reason=f"{reason.strip()} — {note}",
            detail={"cancellation_id": request.pk, "via": via},
        )
        return None
    if can_proceed(case.cancel):
        apply_transition(
            case,
            "cancel",
            actor=actor,
            reason=reason.strip(),
            detail={"cancellation_id": request.pk, "via": via},
        )
        request.outcome = CancellationRequest.Outcome.CANCELLED
        request.settled_at = timezone.now()
        request.save(update_fields=["outcome", "settled_at"])
        return None
    # Applying or held: the change may already be at the order system. The request is
    # saved; a running attempt is asked to stop; the evidence decides the outcome.
    bump_and_save(case, [])
    record_event(
        case=case,
        action=Action.CANCELLATION_REQUESTED,
        actor=actor,
        reason=reason.strip(),
        detail={"cancellation_id": request.pk, "via": via, "status": case.status},
    )
    attempts_request_stop(
        case,
        actor=actor,
        reason="Cancellation requested for {attempt}: it stops at its next heartbeat; if it "
        "already sent the change, the evidence decides",
        detail={"cancellation_id": request.pk},
    )
    return None


def _cancellation_refused(case: Case, actor: Actor, reason: str, via: str) -> TransitionRejected:
    """A cancellation of a done case: the request is kept, refused, with an event; the answer
    says why in plain words."""
    from cases.models import CancellationRequest

    text = (
        f"{case.reference} is done: the change is applied at the order system, so there is "
        "nothing left to cancel. Reversing it is a new proposal that needs its own approval."
    )
    request = CancellationRequest.objects.create(
        case=case,
        reason=reason.strip(),
        via=via,
        requested_by=user_or_none(actor),
        requested_by_label=actor_label(actor),
        outcome=CancellationRequest.Outcome.REFUSED,
        settled_at=timezone.now(),
    )
    record_fact(
        case=case,
        action=Action.CANCELLATION_REFUSED,
        actor=actor,
        reason=f"{reason.strip()} — refused: {text}",
        detail={"cancellation_id": request.pk, "via": via, "status": case.status},
    )
    return TransitionRejected(text, allowed=[])


def case_set_legal_hold(
    *, case: Case, actor: Actor, hold: bool, reason: str, expected_version: int | None = None
) -> Case:
    """Place or lift a legal hold: while set, nothing of the case is purged."""
    if not reason.strip():
        raise InvalidCaseInput("Give a reason.", fields={"reason": ["A reason is required."]})
    validation.ensure_valid(
        reason=validation.text_errors(reason, max_length=validation.REASON_MAX_LENGTH)
    )
    with case_step(
        case, actor=actor, permission="cases.lead_case", what="change the legal hold"
    ) as case:
        if case.legal_hold == hold:
            return case  # already as asked: nothing to change, whatever version was seen
        check_version(case, expected_version)
        case.legal_hold = hold
        bump_and_save(case, ["legal_hold"])
        record_event(
            case=case,
            action=Action.CASE_LEGAL_HOLD_SET if hold else Action.CASE_LEGAL_HOLD_LIFTED,
            actor=actor,
            reason=reason.strip(),
        )
    return case


def account_create(*, account: CustomerAccount, actor: Actor, reason: str = "") -> CustomerAccount:
    """Save a new customer account (``account`` is unsaved) and record it on the account's
    own trail: only a person who may add accounts, or the system."""
    if not isinstance(actor, Worker) and not (
        actor.is_active and (actor.is_superuser or actor.has_perm("cases.add_customeraccount"))
    ):
        raise ActionNotPermitted(f"{actor_label(actor)} may not add accounts.")
    validation.ensure_valid(
        reason=validation.text_errors(reason, max_length=validation.REASON_MAX_LENGTH)
    )
    with transaction.atomic():
        account.save(force_insert=True)
        account_event_record(
            account=account_lock(account),
            action=AccountAction.CREATED,
            actor=actor,
            reason=reason.strip(),
            detail={
                "reference": account.reference,
                "team": account.team_id,
                "verified": account.verified,
                "access_active": account.access_active,
            },
        )
    return account


def account_verify(*, account: CustomerAccount, actor: Actor, reason: str = "") -> int:
    """Record that the customer's identity was checked; their new cases start their work.
    Returns how many waiting cases moved on. Verifying an account already verified records
    nothing new (its waiting cases still move on)."""
    if not isinstance(actor, Worker) and not (
        actor.is_superuser
        or (actor.has_perm("cases.lead_case") and account.team.members.filter(pk=actor.pk).exists())
    ):
        raise ActionNotPermitted(f"{actor_label(actor)} may not verify {account.reference}.")
    moved = 0
    with transaction.atomic():
        locked = account_lock(account)
        newly = not locked.verified
        if newly:
            locked.verified = True
            locked.save(update_fields=["verified"])
        for pk in account.cases.filter(status=Status.NEW).values_list("pk", flat=True):
            case = lock_case(pk)
            if can_proceed(case.request_source_check):
                apply_transition(
                    case,
                    "request_source_check",
                    actor=actor,
                    reason=f"{account.reference} verified: read the order before proposing",
                    next_check_at=timezone.now(),
                )
                enqueue_on_commit("reconciliation.tasks.source_check", case.pk)
                moved += 1
        if newly:
            account_event_record(
                account=locked,
                action=AccountAction.VERIFIED,
                actor=actor,
                reason=reason.strip(),
                detail={"cases_started": moved},
            )
    account.verified = True
    return moved


def actor_may_lead_account(actor: Actor, account: CustomerAccount) -> bool:
    """Workers act for the system; a person needs the lead permission in the account's team."""
    if isinstance(actor, Worker):
        return True
    if not actor.is_active:
        return False
    return actor.is_superuser or (
        actor.has_perm("cases.lead_case") and account.team.members.filter(pk=actor.pk).exists()
    )


def require_account_lead(actor: Actor, account: CustomerAccount, what: str) -> None:
    if not actor_may_lead_account(actor, account):
        raise ActionNotPermitted(f"{actor_label(actor)} may not {what} {account.reference}.")


def account_update(
    *,
    account: CustomerAccount,
    actor: Actor,
    reason: str,
    name: str | None = None,
    email: str | None = None,
) -> CustomerAccount:
    """Change a customer's name or email address: a lead of the account's team, with a reason.

    In one transaction the account changes and each of its open cases records the change (the
    fields, not their values: the audit log outlives the payload). Refused, nothing changes.
    """
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    email_errors: list[str] = []
    if email:
        try:
            validate_email(email)
        except ValidationError as exc:
            email_errors = list(exc.messages)
    validation.ensure_valid(
        reason=validation.text_errors(
            reason, max_length=validation.REASON_MAX_LENGTH, required=True
        ),
        name=validation.key_errors(name, max_length=validation.NAME_MAX_LENGTH)
        if name is not None
        else [],
        email=email_errors,
    )
    require_account_lead(actor, account, "change")
    with transaction.atomic():
        locked = account_lock(account)
        require_account_lead(actor, locked, "change")
        wanted = {"name": name, "email": email}
        changed = sorted(f for f, v in wanted.items() if v is not None and v != getattr(locked, f))
        if not changed:
            return locked
        for field in changed:
            setattr(locked, field, wanted[field])
        locked.save(update_fields=changed)
        account_event_record(
            account=locked,
            action=AccountAction.UPDATED,
            actor=actor,
            reason=reason.strip(),
            detail={"fields": changed},
        )
        for pk in locked.cases.open().order_by("pk").values_list("pk", flat=True):
            record_fact(
                case=lock_case(pk),
                action=Action.ACCOUNT_UPDATED,
                actor=actor,
                reason=f"{locked.reference}: {', '.join(changed)} changed. {reason.strip()}",
                detail={"account": locked.reference, "fields": changed},
            )
    return locked


# Read with the lock of a step that may complete the case (the worker's answer and close): no
# cancellation can be requested while the lock is held, so "none pending" spares
# :func:`cancellations_mark_after_change` its update.
CANCELLATION_PENDING = Exists(
    "cancellation_pending",
    CancellationRequest,
    "case",
    (("outcome", CancellationRequest.Outcome.PENDING.value),),
)


def cancellations_mark_after_change(case: Case) -> str:
    """Pending cancellations of a case whose change is applied arrived after the change.
    Returns the note for the case ('' when there were none). Called only by
    ``reconciliation.complete.case_complete``, the one way an applied case moves on.

    A case locked with :data:`CANCELLATION_PENDING` says whether one is pending; when none is,
    there is nothing to mark and no statement is sent. The answer is taken once: it holds
    under the lock it was read with, not for a later use of the same instance."""
    if case.__dict__.pop(CANCELLATION_PENDING.name, True) is False:
        return ""
    if not update(
        CancellationRequest,
        {"case_id": case.pk, "outcome": CancellationRequest.Outcome.PENDING},
        {"outcome": CancellationRequest.Outcome.ARRIVED_AFTER_CHANGE, "settled_at": timezone.now()},
    ):
        return ""
    return (
        "Cancellation arrived after the change: the change is applied. Reversing it is a new "
        'proposal that needs its own approval ("propose reversal").'
    )
