"""Read side of reconciliation: which order-system profile is current, what it allows, and
which inbound order events a person may see."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q, QuerySet

from cases import kinds
from cases.selectors import team_ids_of
from reconciliation.models import AUTONOMY_MEANING, Autonomy, InboundEvent, OrderSystemProfile

NEVER_PROBED = (
    "The order system at this address was never probed, so none of its safeguards are verified."
)


@dataclass(frozen=True, slots=True)
class AutonomyStatus:
    """What workers may do against the configured order system, and why.

    Attribute names match ``OrderSystemProfile`` so that ``autonomy_badge.html`` renders either.
    """

    autonomy: Autonomy
    reason: str
    profile: OrderSystemProfile | None
    # The change kind this is for (``cases.kinds`` code); "" for the order system as a whole.
    kind: str = ""

    @property
    def meaning(self) -> str:
        return AUTONOMY_MEANING[self.autonomy]

    @property
    def kind_label(self) -> str:
        return kinds.label_of(self.kind) if self.kind else ""

    def get_autonomy_display(self) -> str:
        return self.autonomy.label

    @property
    def probed_at(self) -> dt.datetime | None:
        return self.profile.probed_at if self.profile else None

    @property
    def probed_by_name(self) -> str:
        return self.profile.probed_by_name if self.profile else ""

    @property
    def is_autonomous(self) -> bool:
        return self.autonomy == Autonomy.AUTONOMOUS

    @property
    def kind_evidence(self) -> str:
        """What the probe saw of this kind itself ("Applied, replayed and found …, then changed
        back."; "Refused …; never applied to the sandbox order."), or "" when it has none."""
        if self.profile is None or not self.kind:
            return ""
        return kind_summary(self.profile, self.kind) or ""


def normalised_url(url: str) -> str:
    """The form a profile stores its order system's address in (no trailing slash)."""
    return url.rstrip("/")


def current_profile(base_url: str | None = None) -> OrderSystemProfile | None:
    """The latest probe run for ``base_url`` (default: ``settings.ORDER_SYSTEM_URL``)."""
    url = normalised_url(base_url or settings.ORDER_SYSTEM_URL)
    return (
        OrderSystemProfile.objects.filter(base_url=url)
        .select_related("probed_by")
        .order_by("-probed_at", "-id")
        .first()
    )


def current_autonomy(base_url: str | None = None, *, kind: str | None = None) -> AutonomyStatus:
    """The autonomy the latest profile allows, for the order system as a whole or (``kind``)
    for one change kind: a kind the probe did not prove is review-only, whatever the system's;
    review-only when the system was never probed."""
    profile = current_profile(base_url)
    if profile is None:
        return AutonomyStatus(Autonomy.REVIEW_ONLY, NEVER_PROBED, None, kind or "")
    if kind is None:
        return AutonomyStatus(Autonomy(profile.autonomy), profile.autonomy_reason, profile)
    autonomy = profile.autonomy_of(kind)
    if autonomy == Autonomy(profile.autonomy):
        return AutonomyStatus(autonomy, profile.autonomy_reason, profile, kind)
    return AutonomyStatus(autonomy, kind_unproven_reason(profile, kind), profile, kind)


def kind_summary(profile: OrderSystemProfile, kind: str) -> str | None:
    """The probe's summary of change kind ``kind`` (its evidence), if it has one."""
    found = (profile.evidence.get("kinds") or {}).get(kind) or {}
    summary = found.get("summary") if isinstance(found, dict) else None
    return summary if isinstance(summary, str) and summary else None


def kind_unproven_reason(profile: OrderSystemProfile, kind: str) -> str:
    """Why the probe did not prove change kind ``kind``, in words."""
    summary = kind_summary(profile, kind)
    label = kinds.label_of(kind)
    if summary:
        return f"{label}: {summary}"
    return f"{label} was not probed: review only until the order system is probed again."


def kinds_autonomy(base_url: str | None = None) -> list[AutonomyStatus]:
    """The autonomy of every change kind this desk offers (the admin home, ``/api/kinds/``)."""
    return [current_autonomy(base_url, kind=kind.code) for kind in kinds.kinds()]


def profiles_for(base_url: str | None = None):
    """Probe history for one order system, newest first."""
    url = normalised_url(base_url or settings.ORDER_SYSTEM_URL)
    return OrderSystemProfile.objects.filter(base_url=url).order_by("-probed_at", "-id")


# Operators see the events no team owns yet (``operator`` role; ``may_see_inbound_events``).
UNOWNED_INBOUND_PERMISSION = "reconciliation.view_unowned_inboundevent"


def may_see_inbound_events(user) -> bool:
    """Whether ``user`` gets the inbound events page: superusers, leads and auditors (their
    teams' orders' events) and operators (the events no team owns yet, besides their teams')."""
    return bool(
        user.is_active
        and (may_process_inbound_events(user) or user.has_perm("reconciliation.view_inboundevent"))
    )


def may_process_inbound_events(user) -> bool:
    """Whether ``user`` may have the events they see processed again: superusers, leads and
    operators (an auditor reads them only)."""
    return bool(
        user.is_active
        and (
            user.is_superuser
            or user.has_perm("cases.lead_case")
            or user.has_perm(UNOWNED_INBOUND_PERMISSION)
        )
    )


def inbound_events_for(user, *, unowned: bool = False) -> QuerySet[InboundEvent]:
    """Inbound events ``user`` may see: all of them for a superuser; otherwise those whose
    order belongs, by the account the order system reported when the event was processed, to
    the account of one of the user's teams' cases on that order.

    An order id alone proves nothing (anyone can open a case on any order id), so an event
    whose account is not known yet (pending, or failed before the order could be read), or is
    no account of ours, belongs to no team. A superuser sees it; so does an operator (who holds
    ``reconciliation.view_unowned_inboundevent``) when ``unowned`` asks for it: the inbound
    events page does, so that the events the webhook backlog alert counts can be looked at
    without a superuser's login. A case's page never does: such an event is not evidence about
    any case.

    The check runs for every event a page shows or counts, so it is most of the page's cost.
    The event keeps our account of the reported reference (``account``): through the reference
    it was a look in the accounts and then one in the account's cases, 83 ms to count the past
    week's events a lead may see at 1M cases, against 16 ms (``make bench``'s inbound pages).

    A case is opened in its account's team (``cases.services.case_open``), a case never changes
    team and an account never does. So the rule reads as: the event's account is one of the
    user's teams' accounts, and a case of that account is on the event's order. The account's
    team is stored with the event (``account_team``, carried by the page's indexes): another
    team's event is passed over in the index, with no look for a case. Only the user's own
    accounts' events are looked up, by order and account alone. At 1M cases the lead's count of
    the past week's events looked for a case 4,010 times to find 1,001 of them (6.6 ms); it
    now looks 1,001 times (1.9 ms). The team is stored with the account, so an event without
    a team is one without an account of ours: no team's, an operator's to see (reconciliation
    0017 gave the events stored before it their team). Whether a case of the account is on
    the order is stored with the event too (``on_case``, set with the account and when such a
    case opens; reconciliation 0018 gave the events stored before it theirs): the failed events
    a lead may see were counted with 1,042 looks for a case at 1M cases (9 ms), now none. An
    event without that answer (processed by a worker of the release before 0018) is no team's,
    as one without a team, until a case opens on its order.
    """
    if user is None or not user.is_authenticated:
        return InboundEvent.objects.none()
    if user.is_superuser:
        return InboundEvent.objects.all()
    # Whether a case of the event's account is on its order is stored with the event
    # (``InboundEvent.on_case``) and read in the page's index, with no look for a case. The
    # user's teams are read first and named (``account_team_id IN (…)``, read in the page's
    # index), not joined through the teams and their members for every event: at 1M cases,
    # counting the failed events a lead may see took 35 ms joined.
    owned = Q(account_team__in=team_ids_of(user), on_case=True)
    if unowned and user.has_perm(UNOWNED_INBOUND_PERMISSION):
        return InboundEvent.objects.filter(owned | Q(account_team__isnull=True))
    return InboundEvent.objects.filter(owned)
