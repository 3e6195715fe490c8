"""Retention: closed cases past their retention date lose their payload; the audit stays.

A purge keeps the case row as a tombstone (reference, account, team, status, dates, version)
and every ``CaseEvent`` of it, deletes the case's evidence references, blanks the free-text
payload and replaces the caller's request key, then writes one ``cases.case.purged`` event.
A case is purged only when it is closed, its retention date has passed, no legal hold is set
and nothing under it is unsettled (no active attempt, no cancellation still pending).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from cases import extensions, kinds
from cases.codes import Action
from cases.exceptions import CaseError
from cases.kernel import Actor, Worker, bump_and_save, case_step, record_event
from cases.models import (
    TERMINAL_STATUSES,
    Attempt,
    CancellationRequest,
    Case,
    EvidenceReference,
)

# Free-text fields of the case that may carry what the customer or staff wrote.
PAYLOAD_FIELDS = ("note", "outstanding_question", "waiting_reason", "last_error")

# Why a case is not purged, in the order an operator should read them.
REASONS = {
    "already_purged": "already purged",
    "open": "still open",
    "unsettled": "unsettled work",
    "legal_hold": "legal hold",
    "no_retention_date": "closed without a retention date",
    "not_due": "retention date not passed",
}


class PurgeRefused(CaseError):
    """The case may not be purged now; ``reasons`` lists the codes of ``REASONS`` that apply."""

    code = "purge_refused"
    http_status = 409

    def __init__(self, detail: str, *, refusals: list[tuple[str, str]]):
        reasons = [code for code, _ in refusals]
        super().__init__(detail, reasons=reasons)
        self.reasons = reasons
        self.refusals = refusals


def _active_attempts(case_ref=None):
    qs = Attempt.objects.filter(state__in=Attempt.ACTIVE)
    return qs.filter(case=case_ref) if case_ref is not None else qs


def _pending_cancellations(case_ref=None):
    qs = CancellationRequest.objects.filter(outcome=CancellationRequest.Outcome.PENDING)
    return qs.filter(case=case_ref) if case_ref is not None else qs


def purgeable_cases(*, today: dt.date | None = None) -> QuerySet[Case]:
    """Closed, unpurged cases past ``retention_until``, without legal hold or unsettled work."""
    today = today or timezone.localdate()
    return (
        Case.objects.filter(
            status__in=TERMINAL_STATUSES,
            retention_until__lt=today,
            legal_hold=False,
            purged_at__isnull=True,
        )
        .exclude(Exists(_active_attempts(OuterRef("pk"))))
        .exclude(Exists(_pending_cancellations(OuterRef("pk"))))
        .order_by("retention_until", "number")
    )


def purge_refusals(case: Case, *, today: dt.date) -> list[tuple[str, str]]:
    """Every reason ``case`` may not be purged on ``today`` as ``(code, explanation)``; empty
    when it may. Read under the case lock when the answer decides a purge."""
    reasons: list[tuple[str, str]] = []
    if case.purged_at is not None:
        reasons.append(("already_purged", f"purged at {case.purged_at:%Y-%m-%d %H:%M}"))
        return reasons
    if case.status not in TERMINAL_STATUSES:
        reasons.append(("open", f"status {case.status}"))
    active = list(_active_attempts(case).values_list("reference", flat=True))
    if active:
        reasons.append(("unsettled", f"active attempt {', '.join(active)}"))
    pending = _pending_cancellations(case).count()
    if pending:
        reasons.append(("unsettled", f"{pending} cancellation request(s) still pending"))
    if case.legal_hold:
        reasons.append(("legal_hold", "legal hold is set"))
    if case.retention_until is None:
        if case.status in TERMINAL_STATUSES:
            reasons.append(("no_retention_date", "no retention date recorded"))
    elif case.retention_until >= today:
        reasons.append(("not_due", f"kept until {case.retention_until:%Y-%m-%d}"))
    return reasons


def describe(reasons: list[tuple[str, str]]) -> str:
    return "; ".join(f"{REASONS[code]} ({why})" for code, why in reasons)


def case_purge(
    *, case: Case, actor: Actor, now: dt.datetime | None = None, today: dt.date | None = None
) -> Case:
    """Purge the payload of one case under its row lock and audit it; refuse with
    ``PurgeRefused`` unless the case is purgeable on ``today`` (default: the date of ``now``).

    Kept: the row (reference, account, team, people, status, dates, version, order id and
    kind, and a change that is not personal), its events, attempts, operations and proposals.
    Removed: evidence references, the free-text payload, a personal change (an address: on the
    case and, through ``cases.extensions.on_payload_purged``, on its proposals and operations,
    each keeping its kind), the texts of its cancellation requests, and the caller's request
    key (replaced by ``purged-<pk>``, unique per account).
    """
    now = now or timezone.now()
    today = today or timezone.localdate(now)
    with case_step(case, actor=actor, permission="cases.lead_case", what="purge the case") as case:
        refusals = purge_refusals(case, today=today)
        if refusals:
            raise PurgeRefused(
                f"{case.reference} cannot be purged: {describe(refusals)}.",
                refusals=refusals,
            )
        # No refusal means a retention date: without one a case is refused as "open" or
        # "no_retention_date".
        retention_until = case.retention_until
        assert retention_until is not None
        evidence_deleted, _ = EvidenceReference.objects.filter(case=case).delete()
        cancellation_texts = (
            CancellationRequest.objects.filter(case=case).exclude(reason="").update(reason="")
        )
        blanked = [name for name in PAYLOAD_FIELDS if getattr(case, name)]
        for name in PAYLOAD_FIELDS:
            setattr(case, name, "")
        # A personal change (an address) goes with the payload; a date stays.
        change = kinds.purged(case.change)
        if change != case.change:
            case.change, case.order_seen = change, None
            blanked += ["change", "order_seen"]
        rows_purged = extensions.on_payload_purged(case)
        case.request_key = f"purged-{case.pk}"
        case.purged_at = now
        bump_and_save(case, [*PAYLOAD_FIELDS, "change", "order_seen", "request_key", "purged_at"])
        record_event(
            case=case,
            action=Action.CASE_PURGED,
            actor=actor,
            reason=(
                f"Retention ended {retention_until:%Y-%m-%d}: payload purged, audit trail kept"
            ),
            detail={
                "evidence_references_deleted": evidence_deleted,
                "fields_blanked": blanked,
                "request_key_replaced": True,
                "cancellation_texts_blanked": cancellation_texts,
                "change_rows_purged": rows_purged,
                "retention_until": retention_until.isoformat(),
                "events_kept": case.events.count(),
            },
        )
    return case


@dataclass
class PurgeSummary:
    """What one ``purge_expired`` run examined and did. References are case references."""

    execute: bool
    today: dt.date
    candidates: list[str] = field(default_factory=list)
    purged: list[str] = field(default_factory=list)
    would_purge: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    skipped_codes: dict[str, list[str]] = field(default_factory=dict)
    not_due: int = 0
    open_cases: int = 0

    @property
    def skipped_by_reason(self) -> dict[str, int]:
        """How many examined cases each reason held back (a case may count under several)."""
        counts: dict[str, int] = {}
        for codes in self.skipped_codes.values():
            for code in dict.fromkeys(codes):
                counts[code] = counts.get(code, 0) + 1
        return counts


Progress = Callable[[int, int, str, str, str], None]


def purge_expired(
    *,
    execute: bool = False,
    today: dt.date | None = None,
    progress: Progress | None = None,
    actor: Actor | None = None,
) -> PurgeSummary:
    """Examine every unpurged case whose retention date has passed (and closed cases without
    one) and purge those that may be purged; a dry run (the default) writes nothing.

    Each purge is its own transaction, so a refusal (a legal hold set meanwhile) skips one case
    and the run goes on. ``progress(index, total, reference, outcome, reason)`` is called once
    per examined case with outcome ``purged``, ``would purge`` or ``skipped``.
    """
    today = today or timezone.localdate()
    actor = actor or Worker.current("retention")
    summary = PurgeSummary(execute=execute, today=today)
    examined = Case.objects.filter(purged_at__isnull=True).filter(
        Q(retention_until__lt=today) | Q(status__in=TERMINAL_STATUSES, retention_until__isnull=True)
    )
    summary.not_due = Case.objects.filter(
        purged_at__isnull=True, status__in=TERMINAL_STATUSES, retention_until__gte=today
    ).count()
    summary.open_cases = Case.objects.open().count()
    rows = list(examined.order_by("retention_until", "number").values_list("pk", "reference"))
    total = len(rows)
    summary.candidates = [reference for _, reference in rows]
    for index, (pk, reference) in enumerate(rows, start=1):
        case = Case.objects.get(pk=pk)
        refusals = purge_refusals(case, today=today)
        outcome = "skipped" if refusals else ("purged" if execute else "would purge")
        if outcome == "purged":
            try:
                case_purge(case=case, actor=actor, today=today)
            except PurgeRefused as refused:  # changed since it was read: a hold was set
                outcome, refusals = "skipped", refused.refusals
        why = describe(refusals)
        if outcome == "purged":
            summary.purged.append(reference)
        elif outcome == "would purge":
            summary.would_purge.append(reference)
        else:
            summary.skipped[reference] = why
            summary.skipped_codes[reference] = [code for code, _ in refusals]
        if progress is not None:
            progress(index, total, reference, outcome, why)
    return summary
