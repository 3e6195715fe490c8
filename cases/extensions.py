"""The kernel's extension points: the few places apps built on it (approvals, reconciliation)
plug in, so that nothing in ``cases`` imports them.

Each registry is filled from the upper app's ``AppConfig.ready`` (the way ``cases.actions``
and ``cases.services.UNSENT_DECISION_CHECKS`` are). Registering is idempotent: the same name or
the same function registered twice is kept once. With an app not installed its contributions
are simply missing; the kernel still works.

What a contribution may do:

- **Queue sources** and **dashboard tiles** only read. Their rows must be scoped to the user's
  teams through the selectors (the team wall is theirs to keep); they never write.
- **Dashboard panels** only read, and return HTML already escaped (``render_to_string``).
- **The decider provider** only reads: who may decide what a case waits for.
- **Before-evidence-replaced**, **closed-unapplied**, **request-joined** and **payload-purged
  hooks** write. They run inside the
  caller's transaction, with the case row locked by the caller's kernel step
  (``cases.kernel.case_step``), so what they write commits or rolls back with the step itself.
  A hook must not start work outside that transaction (use ``transaction.on_commit`` for
  that), must not move the case's status and must not swallow errors: an exception aborts the
  step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from cases import selectors
from cases.models import Case, Status

Viewer = AbstractBaseUser | AnonymousUser


# --- queues: the lists an admin page shows and polls (``cases.live``) -------------------------


@dataclass(frozen=True)
class QueueSource:
    """A named queue. ``rows(user)`` is what ``user`` sees in it, scoped to their teams.

    ``case_lookup`` leads from a row to its case for the live digest's version and update
    time: ``""`` when the rows are cases, ``"case__"`` when each row belongs to one.
    """

    name: str
    rows: Callable[[Viewer], QuerySet[Any]]
    case_lookup: str = ""


QUEUE_SOURCES: dict[str, QueueSource] = {}


def register_queue(source: QueueSource) -> QueueSource:
    QUEUE_SOURCES[source.name] = source
    return source


def _cases_with_status(status: str) -> Callable[[Viewer], QuerySet[Case]]:
    def rows(user: Viewer) -> QuerySet[Case]:
        return selectors.cases_for(user).filter(status=status)

    return rows


# The kernel's own queues, first in the list.
register_queue(QueueSource("held", _cases_with_status(Status.HELD)))
register_queue(QueueSource("needs_attention", _cases_with_status(Status.NEEDS_ATTENTION)))


# --- the admin home (``cases.templatetags.holdfast``) -----------------------------------------


@dataclass(frozen=True)
class DashboardTile:
    """One line of "Needs a person": a label, how many for ``user``, and where they are listed.

    ``url`` is called when the page renders (the URLconf is not loaded at ``ready``). Tiles
    follow the kernel's own, in ``order``.
    """

    label: str
    count: Callable[[Viewer], int]
    url: Callable[[], str]
    order: int = 100
    # Whether ``user`` gets the tile at all (its list is a page they may open): by default,
    # everyone does.
    shown: Callable[[Viewer], bool] | None = None

    def shown_to(self, user: Viewer) -> bool:
        return self.shown is None or self.shown(user)


@dataclass(frozen=True)
class DashboardPanel:
    """A box of its own on the admin home, after the kernel's: a title and its HTML."""

    title: str
    render: Callable[[HttpRequest], SafeString]
    order: int = 100


DASHBOARD_TILES: dict[str, DashboardTile] = {}
DASHBOARD_PANELS: dict[str, DashboardPanel] = {}


def register_tile(tile: DashboardTile) -> DashboardTile:
    DASHBOARD_TILES[tile.label] = tile
    return tile


def register_panel(panel: DashboardPanel) -> DashboardPanel:
    DASHBOARD_PANELS[panel.title] = panel
    return panel


def dashboard_tiles() -> list[DashboardTile]:
    return sorted(DASHBOARD_TILES.values(), key=lambda tile: (tile.order, tile.label))


def dashboard_panels() -> list[DashboardPanel]:
    return sorted(DASHBOARD_PANELS.values(), key=lambda panel: (panel.order, panel.title))


# --- who may decide a case (``cases.next_action``) --------------------------------------------

# Given a case, the people who may decide what it waits for, or None when it waits for no
# decision the provider knows of. One provider (approvals: the proposal awaiting review).
DeciderProvider = Callable[[Case], Sequence[AbstractBaseUser] | None]

_deciders: list[DeciderProvider] = []


def register_deciders(provider: DeciderProvider) -> DeciderProvider:
    """Set the one provider of "who may decide this case" (a second call replaces it)."""
    _deciders[:] = [provider]
    return provider


def case_deciders(case: Case) -> Sequence[AbstractBaseUser] | None:
    """Who may decide ``case`` now, or None when nothing is awaiting a decision (or no
    provider is registered)."""
    if not _deciders:
        return None
    return _deciders[0](case)


# The page where the decision ``case`` waits for is taken (approvals: the proposal's), as a
# path; None when nothing awaits one. Where a notification to decide leads.
DecisionPath = Callable[[Case], str | None]

_decision_paths: list[DecisionPath] = []


def register_decision_path(provider: DecisionPath) -> DecisionPath:
    """Set the one provider of the decision page of a case (a second call replaces it)."""
    _decision_paths[:] = [provider]
    return provider


def case_decision_path(case: Case) -> str | None:
    if not _decision_paths:
        return None
    return _decision_paths[0](case)


# --- the decisions a person may take now (the "Mine to answer now" tile and list) ----------

# Given a person, the ids of the cases whose awaited decision they may take now, as a
# queryset of case ids (approvals: the proposals awaiting review they may decide, by the
# four-eyes rule). Read only, scoped to the person's teams.
DecisionsOf = Callable[[Viewer], QuerySet[Any]]

_decisions: list[DecisionsOf] = []


def register_decisions(provider: DecisionsOf) -> DecisionsOf:
    """Set the one provider of "the decisions this person may take" (a second call replaces
    it)."""
    _decisions[:] = [provider]
    return provider


def decisions_of(user: Viewer) -> QuerySet[Any] | None:
    """The case ids whose decision ``user`` may take now, or None with no provider."""
    if not _decisions:
        return None
    return _decisions[0](user)


# --- before the evidence is replaced (``cases.services.case_transition``) -------------------

# Called as ``hook(case, reason)`` when a person asks for the order to be read again, before
# the case moves: whatever rests on the evidence about to be replaced is withdrawn (approvals:
# the open proposal and its approvals). Runs in the caller's transaction, the case locked.
BeforeEvidenceReplaced = Callable[[Case, str], object]

BEFORE_EVIDENCE_REPLACED: list[BeforeEvidenceReplaced] = []


def register_before_evidence_replaced(hook: BeforeEvidenceReplaced) -> BeforeEvidenceReplaced:
    if hook not in BEFORE_EVIDENCE_REPLACED:
        BEFORE_EVIDENCE_REPLACED.append(hook)
    return hook


def before_evidence_replaced(case: Case, reason: str) -> None:
    """Run the registered hooks, in registration order, for the locked ``case``."""
    for hook in BEFORE_EVIDENCE_REPLACED:
        hook(case, reason)


# --- when a case closes with nothing applied (``cases.kernel.apply_transition``) -------------

# Called as ``hook(case, reason)`` when a transition cancels or stops a case (nothing of its
# change applied), after the transition's event, in its transaction, the case locked: what an
# upper app holds open for the case closes too (approvals: the open proposal is withdrawn and
# its approvals revoked, so no approver is asked to decide a closed case).
OnClosedUnapplied = Callable[[Case, str], object]

ON_CLOSED_UNAPPLIED: list[OnClosedUnapplied] = []
# The statuses that close a case with nothing applied.
CLOSED_UNAPPLIED = frozenset({Status.CANCELLED, Status.STOPPED})


def register_on_closed_unapplied(hook: OnClosedUnapplied) -> OnClosedUnapplied:
    if hook not in ON_CLOSED_UNAPPLIED:
        ON_CLOSED_UNAPPLIED.append(hook)
    return hook


def on_closed_unapplied(case: Case, reason: str) -> None:
    """Run the registered hooks, in registration order, for the locked ``case``."""
    for hook in ON_CLOSED_UNAPPLIED:
        hook(case, reason)


# --- when a person joins a case's request (``cases.services.case_open``) ----------------------

# Called as ``hook(case)`` when a person re-sends a case's request and so becomes an author of
# its intent, after the ``cases.case.request_joined`` event, in its transaction, the case
# locked: an upper app that keeps who authored what records them at once (approvals: the open
# proposal's authors, so its page and the API's ``may_decide`` refuse them from then on, as
# the decision itself does).
OnRequestJoined = Callable[[Case], object]

ON_REQUEST_JOINED: list[OnRequestJoined] = []


def register_on_request_joined(hook: OnRequestJoined) -> OnRequestJoined:
    if hook not in ON_REQUEST_JOINED:
        ON_REQUEST_JOINED.append(hook)
    return hook


def on_request_joined(case: Case) -> None:
    """Run the registered hooks, in registration order, for the locked ``case``."""
    for hook in ON_REQUEST_JOINED:
        hook(case)


# --- when a case has opened (``cases.services.case_open``) ------------------------------------

# Called as ``hook(case)`` once the new case's opening has committed (outside its transaction,
# nothing locked): an upper app that keeps facts about the case's order learns that a case is
# on it (reconciliation: the order's inbound events become its team's to see).
OnCaseOpened = Callable[[Case], object]

ON_CASE_OPENED: list[OnCaseOpened] = []


def register_on_case_opened(hook: OnCaseOpened) -> OnCaseOpened:
    if hook not in ON_CASE_OPENED:
        ON_CASE_OPENED.append(hook)
    return hook


def on_case_opened(case: Case) -> None:
    """Run the registered hooks, in registration order, for the committed new ``case``."""
    for hook in ON_CASE_OPENED:
        hook(case)


# --- when a case's payload is purged (``cases.retention.case_purge``) ------------------------

# Called as ``hook(case)`` inside the purge's step, the case locked: the rows an upper app keeps
# of the case's change (approvals: proposals and operations) lose what the case's own payload
# loses (``cases.kinds.purged``). Returns how many rows it changed.
OnPayloadPurged = Callable[[Case], int]

ON_PAYLOAD_PURGED: list[OnPayloadPurged] = []


def register_on_payload_purged(hook: OnPayloadPurged) -> OnPayloadPurged:
    if hook not in ON_PAYLOAD_PURGED:
        ON_PAYLOAD_PURGED.append(hook)
    return hook


def on_payload_purged(case: Case) -> int:
    """Run the registered hooks for the locked ``case``; the rows they changed."""
    return sum(hook(case) for hook in ON_PAYLOAD_PURGED)


# --- whether the workers may settle a held case by themselves (``cases.next_action``) ---------

# Given a held case, whether the workers may settle it from evidence without a person
# (reconciliation: the order system's autonomy for the case's kind of change).
SelfSettling = Callable[[Case], bool]
# The change kinds whose held cases the workers may settle by themselves (for filters).
SelfSettlingKinds = Callable[[], Iterable[str]]

_self_settling: list[SelfSettling] = []
_self_settling_kinds: list[SelfSettlingKinds] = []


def register_self_settling(
    provider: SelfSettling, kinds: SelfSettlingKinds | None = None
) -> SelfSettling:
    """Set the one provider of "the workers may settle this held case" and, for filters, of
    the kinds they may settle (a second call replaces them)."""
    _self_settling[:] = [provider]
    _self_settling_kinds[:] = [kinds] if kinds is not None else []
    return provider


def workers_may_settle(case: Case) -> bool:
    """Whether the workers may settle held ``case`` by themselves (True with no provider:
    the kernel alone knows no reason they may not)."""
    return _self_settling[0](case) if _self_settling else True


def self_settling_kinds() -> list[str]:
    """The change kinds whose held cases the workers may settle by themselves (every kind with
    no provider, as ``workers_may_settle``)."""
    if _self_settling_kinds:
        return sorted(_self_settling_kinds[0]())
    from cases import kinds

    return [code for code in kinds.codes() if workers_may_settle(Case(kind=code))]
