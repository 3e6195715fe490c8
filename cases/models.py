"""The case record: one customer request, its owner and backup, its status and its audit trail.

Models only hold fields, constraints and in-memory ``@transition`` methods. Every write of a
case is a step of ``cases.kernel`` (called from the services of each app): it locks, checks the
expected version and the actor's permission, applies the transition, bumps ``version`` and
writes one ``CaseEvent`` in the same transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Upper
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

from cases import kinds
from cases.append_only import GuardedModel, GuardedQuerySet
from cases.disjoint import EitherOf
from cases.prefixes import free_case_prefix

if TYPE_CHECKING:
    from django.contrib.auth.models import User

_T = TypeVar("_T")


def _conditions(*checks: Callable[[Case], bool]) -> list[Callable[[models.Model], bool]]:
    """``checks`` as a transition's ``conditions``: django-fsm calls each with the instance the
    transition runs on (here always a ``Case``), but types them as taking any model."""
    return cast("list[Callable[[models.Model], bool]]", list(checks))


class Team(models.Model):
    """A support team. Cases, accounts and staff belong to teams; every query is scoped to them."""

    name = models.CharField(max_length=100, unique=True)
    # Validated by ``cases.references.case_prefix_errors`` (the admin's form); given from the
    # name when none is set (``save``).
    case_prefix = models.CharField(
        max_length=8,
        unique=True,
        blank=True,
        validators=[RegexValidator(r"^[A-Za-z]{1,8}\Z", "1 to 8 letters A-Z.")],
        help_text="The team's case references: D for D-41. Its own counter: other teams' "
        "numbers reveal nothing of this team's. Set once, before the team's first case.",
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="holdfast_teams", blank=True
    )
    default_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The support lead who owns new cases of this team.",
    )
    default_backup = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Who is responsible for new cases while the owner is away.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        if not self.case_prefix:
            taken = Team.objects.exclude(pk=self.pk).values_list("case_prefix", flat=True)
            self.case_prefix = free_case_prefix(self.name, taken)
        super().save(*args, **kwargs)


class StaffProfile(models.Model):
    """What Holdfast needs to know about a person beyond the auth user: their absence."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="staff_profile"
    )
    away_until = models.DateField(
        null=True,
        blank=True,
        help_text="While set and not past, this person's cases fall to their named backup.",
    )

    def __str__(self) -> str:
        return f"Profile of {self.user}"

    def is_away(self, on: dt.date | None = None) -> bool:
        on = on or timezone.localdate()
        return self.away_until is not None and self.away_until >= on


class CustomerAccount(models.Model):
    reference = models.CharField(max_length=40, unique=True, help_text="e.g. ACC-100")
    name = models.CharField(max_length=200)
    email = models.EmailField(blank=True)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="accounts")
    verified = models.BooleanField(
        default=False, help_text="Identity checked: only verified accounts get work done."
    )
    access_active = models.BooleanField(
        default=True, help_text="The customer may still have changes made on their behalf."
    )
    access_revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["reference"]
        indexes = [
            # The desk's search (``icontains``) by account reference and name: PostgreSQL only
            # (migrations 0012 and 0013 build them concurrently; other databases skip them).
            GinIndex(
                OpClass(Upper("reference"), name="gin_trgm_ops"), name="account_reference_trgm"
            ),
            GinIndex(OpClass(Upper("name"), name="gin_trgm_ops"), name="account_name_trgm"),
        ]

    def __str__(self) -> str:
        return f"{self.reference} {self.name}"


class CounterRow(models.Model):
    """Named monotonic counters (case numbers; fencing tokens on SQLite)."""

    name = models.CharField(max_length=50, primary_key=True)
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class Status(models.TextChoices):
    NEW = "new", "New"
    WAITING_SOURCE = "waiting_source", "Waiting for the order source"
    PREPARING_PROPOSAL = "preparing_proposal", "Preparing a proposal"
    AWAITING_REVIEW = "awaiting_review", "Awaiting review"
    # A person must prepare another proposal (the last one was rejected): no worker acts.
    PROPOSAL_REJECTED = "proposal_rejected", "Rejected: a person prepares another proposal"
    READY = "ready", "Ready to apply"
    APPLYING = "applying", "Applying"
    HELD = "held", "Held: the outcome is unknown"
    NEEDS_ATTENTION = "needs_attention", "Needs attention"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"
    STOPPED = "stopped", "Stopped"


TERMINAL_STATUSES = frozenset({Status.DONE, Status.CANCELLED, Status.STOPPED})
OPEN_STATUSES = frozenset(set(Status) - TERMINAL_STATUSES)
# Before a claim nothing can have been sent to the order system.
SENDABLE_STATUSES = (
    Status.NEW,
    Status.WAITING_SOURCE,
    Status.PREPARING_PROPOSAL,
    Status.AWAITING_REVIEW,
    Status.PROPOSAL_REJECTED,
    Status.READY,
)


class WaitingOn(models.TextChoices):
    NOBODY = "nobody", "Nobody"
    ORDER_SYSTEM = "order_system", "The order system"
    APPROVERS = "approvers", "The team's approvers"
    OWNER = "owner", "The responsible person"
    CUSTOMER = "customer", "The customer"
    WORKER = "worker", "A background worker"


# The waits that are a person's to answer: each has a follow-up time (``cases.followups``).
PERSON_WAITS = frozenset({WaitingOn.OWNER, WaitingOn.APPROVERS, WaitingOn.CUSTOMER})


class WaitReason(models.TextChoices):
    """Why a case waits on a person: what a follow-up policy is set for (``FollowUpPolicy``)."""

    UNVERIFIED = "unverified", "A new request waits for its account to be verified"
    DRAFT = "draft", "A draft proposal waits for its author"
    AWAITING_REVIEW = "awaiting_review", "A proposal awaits an approver's decision"
    REJECTED = "rejected", "Rejected: a person prepares another proposal"
    SUPERVISED = "supervised", "A person must start the apply (supervised)"
    HELD = "held", "Held: a person must reconcile from evidence"
    NEEDS_ATTENTION = "needs_attention", "Needs attention: a person decides"
    CUSTOMER = "customer", "The responsible person waits on the customer"
    OTHER = "other", "Another wait on a person"


class FollowUpState(models.TextChoices):
    """Where a person's wait stands against its follow-up time."""

    NONE = "", "No person is waited on"
    ON_TIME = "on_time", "On time"
    AT_RISK = "at_risk", "At risk"
    OVERDUE = "overdue", "Overdue"


def overdue_cutoff(now: dt.datetime | None = None) -> dt.datetime:
    """A next check or a follow-up before this moment is overdue: due now is not late, only
    past the grace."""
    return (now or timezone.now()) - dt.timedelta(minutes=settings.FOLLOW_UP_GRACE_MINUTES)


class CaseQuerySet(models.QuerySet["Case"]):
    def open(self) -> CaseQuerySet:
        return self.exclude(status__in=TERMINAL_STATUSES)

    def overdue(self, now: dt.datetime | None = None) -> CaseQuerySet:
        """Open cases that are really late: a person's follow-up time or the next check passed
        more than the grace ago (work due now is not late)."""
        cutoff = overdue_cutoff(now)
        return self.open().filter(Q(follow_up_at__lt=cutoff) | Q(next_check_at__lt=cutoff))

    def at_risk(self, now: dt.datetime | None = None) -> CaseQuerySet:
        """Open cases whose person's follow-up is at risk: in its last stretch, not late yet."""
        now = now or timezone.now()
        return self.open().filter(follow_up_risk_at__lte=now, follow_up_at__gte=overdue_cutoff(now))

    def responsible(self, user: User, on: dt.date | None = None) -> CaseQuerySet:
        """Cases for which ``user`` is the responsible person today (owner, or backup if away).

        Who is away is read first (the staff away on ``on``: a few people) and named in the
        query, as ``cases.selectors.scoped_to_teams`` names the teams: joined to the staff
        profiles, the case list filtered by this ran 19 ms at 1M cases against 5 ms at 10k
        (a parallel walk of the cases), and its capped count 21 ms against 1; named, 6 and 10
        ms at 1M (the page 1.21× its time at 10k in ``make bench``, 1.42× before)."""
        on = on or timezone.localdate()
        away = list(
            StaffProfile.objects.filter(away_until__gte=on)
            .order_by("user_id")
            .values_list("user_id", flat=True)
        )
        backing_up = Q(backup=user, owner_id__in=away)
        if user.pk in away:
            return self.filter(backing_up)
        if not away:
            return self.filter(owner=user)
        # No case is in both parts (the first's owner is not away, the second's is): a bounded
        # count counts them part by part (``cases.disjoint``).
        return self.filter(EitherOf(Q(owner=user), backing_up))

    def waiting_on_responsible(self, user: User, on: dt.date | None = None) -> CaseQuerySet:
        """Open cases for which ``user`` is the responsible person now and that wait on that
        person (not on the approvers, the order system or a worker)."""
        return self.open().responsible(user, on).filter(waiting_on=WaitingOn.OWNER)


class Case(FSMModelMixin, models.Model):
    """One customer request (D-41). Never created by a retry, an attempt or a takeover."""

    reference = models.CharField(max_length=20, unique=True, editable=False)
    # Counted per team (``cases.references``): unique with the team (``case_number_per_team``).
    number = models.PositiveIntegerField(editable=False)
    # An account's cases are found through ``case_unique_request_key_per_account``, whose
    # first column it is (the foreign key's own index was the same thing again: 0016).
    account = models.ForeignKey(
        CustomerAccount, on_delete=models.PROTECT, related_name="cases", db_index=False
    )
    request_key = models.CharField(
        max_length=100, help_text="The caller's idempotency key for this request."
    )
    order_id = models.CharField(max_length=60)  # indexed by ``case_order_idx`` (Meta)
    kind = models.CharField(
        max_length=40, help_text="The code of the change kind asked for (``cases.kinds``)."
    )
    change = models.JSONField(
        default=dict,
        help_text="The change the customer asked for, whole, in its kind's canonical form.",
    )
    note = models.TextField(blank=True)

    # Indexed in ``Meta.indexes`` (``cases_case_status_95787cb3``), without the pattern index
    # Django adds to an indexed text field: no query matches a status by pattern (0038).
    status = FSMField(default=Status.NEW, choices=Status.choices, protected=True, max_length=30)
    version = models.PositiveIntegerField(default=1, editable=False)

    # Not indexed alone: ``case_number_per_team`` (team, number) answers every look by team.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="cases", db_index=False)
    # Indexed with the team (``case_owner_team_idx``, Meta), not on its own.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="owned_cases",
        db_index=False,
    )
    # Indexed with the owner and the team (``case_backup_owner_idx``, Meta), not on its own.
    backup = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="backup_cases",
        null=True,
        blank=True,
        db_index=False,
    )
    # Indexed in ``Meta.indexes``, as the status (0038).
    waiting_on = models.CharField(
        max_length=20, choices=WaitingOn.choices, default=WaitingOn.NOBODY
    )
    waiting_reason = models.CharField(max_length=200, blank=True)
    outstanding_question = models.TextField(blank=True)
    next_check_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_checked_order_version = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    retry_count = models.PositiveIntegerField(
        default=0, help_text="Consecutive transient failures of the current step."
    )
    # One counter per kind of work (``cases.retries``): a failed source check never counts
    # against the apply, nor a failed settlement against either.
    retry_counts = models.JSONField(
        default=dict,
        blank=True,
        help_text="Consecutive transient failures per kind of work (apply, source_check, "
        "reconcile); the kind's bound is its retry policy's.",
    )
    apply_authorized_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Supervised autonomy: the person who started this apply.",
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    retention_until = models.DateField(null=True, blank=True)
    legal_hold = models.BooleanField(
        default=False, help_text="While set, nothing of this case is purged."
    )
    purged_at = models.DateTimeField(
        null=True, blank=True, help_text="Payload purged; the row is a tombstone for the audit."
    )
    revoked_at = models.DateTimeField(
        null=True, blank=True, help_text="Authority revoked: no new child work is admitted."
    )
    revocation_kind = models.CharField(max_length=20, blank=True)
    order_seen = models.JSONField(
        null=True,
        blank=True,
        help_text="The order's current value of the case's kind at the last source check "
        "(the kind's ``seen``): the evidence a reversal goes back to.",
    )
    # The person's clock (``cases.followups``): set by the kernel whenever the case starts to
    # wait on a person, from the follow-up policy of its kind and reason; cleared when it
    # stops. ``next_check_at`` stays the workers' due time.
    # Nullable: a new NOT NULL column makes SQLite rebuild the whole table (and its
    # PostgreSQL-only indexes with it); empty is None.
    follow_up_reason = models.CharField(
        max_length=20, choices=WaitReason.choices, null=True, blank=True, editable=False
    )
    follow_up_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the person waited on is late."
    )
    follow_up_risk_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="From when the follow-up is at risk."
    )
    follow_up_reminded_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the reminder for it was written."
    )
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        # No database constraint: adding one validates every case under a lock that blocks
        # writes; Django's PROTECT still refuses deleting a user who opened a case.
        db_constraint=False,
        db_index=False,  # ``case_opened_by_idx``, built concurrently
        help_text="The staff member who opened the case (told when it is done or cancelled); "
        "empty for an integration or the system.",
    )

    objects = CaseQuerySet.as_manager()

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["account", "request_key"], name="case_unique_request_key_per_account"
            ),
            # Each team counts its own cases (``cases.references``; cases 0026).
            models.UniqueConstraint(fields=["team", "number"], name="case_number_per_team"),
            models.CheckConstraint(
                condition=Q(backup__isnull=True) | ~Q(backup=models.F("owner")),
                name="case_backup_is_not_owner",
                # What a form that breaks it says (the admin's case form validates constraints):
                # the service's words (``cases.services.case_assign``), not the constraint's name.
                violation_error_message="The backup must be someone other than the owner.",
            ),
            # One open case per order and kind (``cases.services.case_open`` says so first):
            # different kinds on one order may be open together (cases 0019).
            models.UniqueConstraint(
                fields=["account", "order_id", "kind"],
                condition=~Q(status__in=["done", "cancelled", "stopped"]),
                name="case_one_open_per_order_kind",
            ),
        ]
        indexes = [
            # The lists' filters by status and by who the case waits on. Plain b-trees: as
            # ``db_index=True`` these fields also had Django's ``varchar_pattern_ops`` index,
            # which only a ``LIKE`` uses and none does, one more entry on every update that
            # moves a case (0038 dropped them; the names are the ones Django gave).
            models.Index(fields=["status"], name="cases_case_status_95787cb3"),
            models.Index(fields=["waiting_on"], name="cases_case_waiting_on_9b7ec905"),
            # The lists' filter by owner, within the person's teams: the page's count reads the
            # index alone (at 1M cases it read 34,548 cases to count 1,001 of one owner; 0039).
            # It serves every look by owner too, so the owner has no index of its own.
            models.Index(fields=["owner", "team"], name="case_owner_team_idx"),
            # "Responsible now" (``CaseQuerySet.responsible``): the cases a person backs up for
            # the owners away, within the person's teams, read in the index alone (through the
            # backup's own index, a bitmap of every case the person backs up, 27,580 at 1M
            # cases, was built and met with the away owners' 83,407 to find none: 9 ms; 0040).
            # It serves every look by backup too, so the backup has no index of its own.
            models.Index(fields=["backup", "owner", "team"], name="case_backup_owner_idx"),
            # The desk's search (``icontains``, field by field: ``cases.admin.search``) by case
            # reference, order id and request key: PostgreSQL only (migrations 0012 and 0013
            # build them concurrently; other databases skip them).
            GinIndex(OpClass(Upper("reference"), name="gin_trgm_ops"), name="case_reference_trgm"),
            GinIndex(OpClass(Upper("order_id"), name="gin_trgm_ops"), name="case_order_id_trgm"),
            GinIndex(
                OpClass(Upper("request_key"), name="gin_trgm_ops"), name="case_request_key_trgm"
            ),
            # The claim of the next due ready case (``reconciliation.claims.claim_next_due``):
            # partial, so it holds only the ready cases however long the history (0014).
            models.Index(
                fields=["next_check_at"], condition=Q(status="ready"), name="case_ready_due_idx"
            ),
            # An order's cases with their account and team, read from the index alone: who may
            # see an inbound event is one look here per event (``inbound_events_for``). It
            # answers lookups by order id, in place of the field's own index (0016).
            models.Index(fields=["order_id", "account", "team"], name="case_order_idx"),
            # The lists' order (``-number``, newest first) read from an index, as the unique
            # number's index did before numbers were per team (0026).
            models.Index(fields=["number"], name="case_number_idx"),
            # Overdue and at-risk follow-ups and the reminders' sweep: partial, so it holds
            # only the cases that wait on a person (0019).
            models.Index(
                fields=["follow_up_at"],
                condition=Q(follow_up_at__isnull=False),
                name="case_follow_up_idx",
            ),
            models.Index(fields=["opened_by"], name="case_opened_by_idx"),
            # The case list's full-text search (``cases.fulltext``) over the note and the
            # reason it waits: words (stemmed, English) and any part of a word (trigrams).
            # PostgreSQL only (migration case_fulltext_search; other databases skip them).
            GinIndex(SearchVector("note", config="english"), name="case_note_fts"),
            GinIndex(OpClass(Upper("note"), name="gin_trgm_ops"), name="case_note_trgm"),
            GinIndex(SearchVector("waiting_reason", config="english"), name="case_reason_fts"),
            GinIndex(
                OpClass(Upper("waiting_reason"), name="gin_trgm_ops"), name="case_reason_trgm"
            ),
        ]
        permissions = [
            ("work_case", "Can work a case (check source, escalate, cancel)"),
            ("lead_case", "Can reassign, stop and resume cases"),
        ]

    def __str__(self) -> str:
        return self.reference

    # --- derived --------------------------------------------------------------------------
    @property
    def owner_is_away(self) -> bool:
        profile = getattr(self.owner, "staff_profile", None)
        return bool(profile and profile.is_away())

    @property
    def responsible_now(self) -> User:
        """The owner, or the named backup while the owner is away."""
        if self.owner_is_away and self.backup is not None:
            return self.backup
        return self.owner

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def change_kind(self) -> kinds.ChangeKind:
        """The kind of the change this case asks for (``cases.kinds``)."""
        return kinds.get(self.kind)

    @property
    def change_description(self) -> str:
        return kinds.describe(self.change)

    @property
    def is_overdue(self) -> bool:
        if self.is_terminal:
            return False
        cutoff = overdue_cutoff()
        return any(
            due is not None and due < cutoff for due in (self.follow_up_at, self.next_check_at)
        )

    def follow_up_state(self, now: dt.datetime | None = None) -> FollowUpState:
        """Where the person's wait stands: on time, at risk (its last stretch) or overdue."""
        if self.is_terminal or self.follow_up_at is None:
            return FollowUpState.NONE
        now = now or timezone.now()
        if self.follow_up_at < overdue_cutoff(now):
            return FollowUpState.OVERDUE
        if self.follow_up_risk_at is not None and self.follow_up_risk_at <= now:
            return FollowUpState.AT_RISK
        return FollowUpState.ON_TIME

    # --- guards ---------------------------------------------------------------------------
    # While ``guards_read_once`` is open: the answers of the guards that read other tables.
    _guards_read: dict[str, Any] | None = None

    @contextmanager
    def guards_read_once(self) -> Iterator[None]:
        """Within, each guard that reads other tables (work in flight, a change applied, a late
        cancellation) reads them once and answers from that. Listing what may happen next
        (``cases.actions.case_actions``) asks every transition's guards: the same few came up
        to six times each. The list is a view of one moment, as the page it is shown on; every
        service asks again when it acts, under the case's lock."""
        if self._guards_read is not None:
            yield
            return
        self._guards_read = {}
        try:
            yield
        finally:
            self._guards_read = None

    def read_once(self, name: str, read: Callable[[], _T]) -> _T:
        """``read()``, or while :meth:`guards_read_once` is open, its first answer."""
        memo = self._guards_read
        if memo is None:
            return read()
        if name not in memo:
            memo[name] = read()
        return memo[name]

    def read_with(self, relation: str) -> list[Any] | None:
        """The rows of ``relation`` read with this case (``prefetch_related``) while
        :meth:`guards_read_once` is open, else None: a page that shows the case's attempts,
        operations and cancellations answers the guards from the rows it shows, with no look of
        its own. Only within that view of one moment; a service reads the locked row's
        relations afresh."""
        if self._guards_read is None:
            return None
        rows = getattr(self, "_prefetched_objects_cache", {}).get(relation)
        return None if rows is None else list(rows)

    def account_verified(self) -> bool:
        return self.account.verified

    def account_has_access(self) -> bool:
        return self.account.access_active

    def nothing_applied(self) -> bool:
        """The change this case is about is not confirmed at the order system."""
        operations = self.read_with("operations")
        if operations is not None and all(op.confirmed_at is None for op in operations):
            return True  # no operation confirmed: nothing of any proposal's applied
        return self.read_once(
            "nothing_applied",
            lambda: (
                not self.operations.filter(
                    confirmed_at__isnull=False,
                    proposals__status__in=["draft", "awaiting_review", "approved"],
                ).exists()
            ),
        )

    def nothing_in_flight(self) -> bool:
        """No attempt is running: nothing can be sent while the case moves this way."""
        in_flight = ("running", "cancel_requested")
        attempts = self.read_with("attempts")
        if attempts is not None:
            return not any(attempt.state in in_flight for attempt in attempts)
        return self.read_once(
            "nothing_in_flight",
            lambda: not self.attempts.filter(state__in=in_flight).exists(),
        )

    def attempts_made(self) -> bool:
        """Any attempt was made for this case."""
        attempts = self.read_with("attempts")
        if attempts is not None:
            return bool(attempts)
        return self.read_once("attempts made", self.attempts.exists)

    def has_pending_cancellation(self) -> bool:
        """A cancellation request waits for its outcome."""
        return self._has_cancellation("pending")

    # --- transitions (in memory only; services save and audit) ----------------------------
    @transition(
        field=status,
        source=[Status.NEW, Status.NEEDS_ATTENTION, Status.PROPOSAL_REJECTED],
        target=Status.WAITING_SOURCE,
        conditions=_conditions(account_verified, account_has_access),
        permission="cases.work_case",
        custom={"label": "Check the source now", "manual": True},
    )
    def request_source_check(self):
        """Ask the workers to (re)read the order: the case waits for the order system."""

    @transition(
        field=status,
        source=Status.WAITING_SOURCE,
        target=Status.PREPARING_PROPOSAL,
        conditions=_conditions(account_has_access),
        custom={"label": "Source checked"},
    )
    def source_checked(self):
        """Current evidence recorded; a proposal can be prepared from it."""

    @transition(
        field=status,
        source=[Status.PREPARING_PROPOSAL, Status.AWAITING_REVIEW, Status.READY, Status.APPLYING],
        target=Status.WAITING_SOURCE,
        custom={"label": "Source changed"},
    )
    def source_changed(self):
        """The order moved past the evidence: the proposal and approval are void."""

    @transition(
        field=status,
        source=Status.PREPARING_PROPOSAL,
        target=Status.AWAITING_REVIEW,
        conditions=_conditions(account_has_access),
        custom={"label": "Submit for review"},
    )
    def submit_for_review(self):
        """One exact proposal waits for a four-eyes decision."""

    @transition(
        field=status,
        source=Status.AWAITING_REVIEW,
        target=Status.READY,
        conditions=_conditions(account_has_access),
        custom={"label": "Approve"},
    )
    def approve(self):
        """Approved and queued; 'ready' is a queue position, not a permission."""

    @transition(
        field=status,
        source=Status.AWAITING_REVIEW,
        target=Status.PROPOSAL_REJECTED,
        custom={"label": "Reject"},
    )
    def reject(self):
        """The approver said no: the responsible person prepares another proposal (no worker
        acts on a rejected case)."""

    @transition(
        field=status,
        source=Status.PROPOSAL_REJECTED,
        target=Status.PREPARING_PROPOSAL,
        conditions=_conditions(account_has_access),
        custom={"label": "Prepare another proposal"},
    )
    def prepare_again(self):
        """A person prepares another proposal for a rejected case."""

    @transition(
        field=status,
        source=[Status.AWAITING_REVIEW, Status.READY],
        target=Status.PREPARING_PROPOSAL,
        custom={"label": "Change the intended change"},
    )
    def revise(self):
        """The intended change itself changed: the old proposal and any approval are void."""

    @transition(
        field=status,
        source=[Status.READY, Status.APPLYING, Status.HELD],
        target=Status.AWAITING_REVIEW,
        custom={"label": "Approval expired"},
    )
    def approval_expired(self):
        """The approval lapsed before the change was applied: a fresh decision is needed."""

    @transition(
        field=status,
        source=Status.READY,
        target=Status.APPLYING,
        conditions=_conditions(account_has_access),
        custom={"label": "Claim"},
    )
    def claim(self):
        """One worker's attempt starts; services make this a compare-and-set."""

    @transition(
        field=status,
        source=Status.APPLYING,
        target=Status.READY,
        custom={"label": "Retry later"},
    )
    def retry_later(self):
        """A transient refusal: nothing was applied; back in the queue with a next check."""

    @transition(
        field=status,
        source=[*SENDABLE_STATUSES, Status.APPLYING, Status.NEEDS_ATTENTION],
        target=Status.HELD,
        custom={"label": "Hold for recovery"},
    )
    def hold_for_recovery(self):
        """Restored records may be older than the order system: reconcile before resuming."""

    @transition(
        field=status,
        source=[Status.APPLYING, Status.READY],
        target=Status.HELD,
        custom={"label": "Hold"},
    )
    def hold(self):
        """Effect unknown, worker missing, or another owner exists: a person must reconcile."""

    @transition(
        field=status,
        source=[Status.APPLYING, Status.HELD],
        target=Status.DONE,
        custom={"label": "Complete"},
    )
    def complete(self):
        """The change is proven applied and the steps after it are confirmed."""

    @transition(
        field=status,
        source=Status.HELD,
        target=Status.READY,
        custom={"label": "Proven applied: resume the steps after apply"},
    )
    def resume_steps(self):
        """The change is proven applied; notification and closing resume, nothing re-applies."""

    @transition(
        field=status,
        source=Status.HELD,
        target=Status.READY,
        conditions=_conditions(account_has_access),
        custom={"label": "Proven absent: may apply again"},
    )
    def settle_absent(self):
        """After the fence, the operation is proven absent; the same operation may be retried."""

    @transition(
        field=status,
        source=[*SENDABLE_STATUSES, Status.APPLYING],
        target=Status.NEEDS_ATTENTION,
        conditions=_conditions(nothing_in_flight),
        permission="cases.work_case",
        custom={"label": "Escalate to a person", "manual": True},
    )
    def escalate(self):
        """Human review: attempts exhausted, invalid input or revoked permission."""

    def has_approved_proposal(self) -> bool:
        return self.proposals.filter(status="approved").exists()

    @transition(
        field=status,
        source=Status.NEEDS_ATTENTION,
        target=Status.READY,
        conditions=_conditions(account_has_access, has_approved_proposal),
        permission="cases.lead_case",
        custom={"label": "Put back in the apply queue", "manual": True},
    )
    def requeue(self):
        """A person decided the cause is gone; every claim guard is checked again."""

    @transition(
        field=status,
        source=[*SENDABLE_STATUSES, Status.NEEDS_ATTENTION],
        target=Status.CANCELLED,
        conditions=_conditions(nothing_applied),
        permission="cases.work_case",
        custom={"label": "Cancel", "manual": True},
    )
    def cancel(self):
        """Before anything can have been sent: nothing to undo."""

    @transition(
        field=status,
        source=[Status.HELD, Status.APPLYING],
        target=Status.CANCELLED,
        custom={"label": "Proven absent: cancelled"},
    )
    def settle_cancelled(self):
        """A cancellation during uncertainty, honoured once the operation is proven absent."""

    @transition(
        field=status,
        source=[*SENDABLE_STATUSES, Status.NEEDS_ATTENTION],
        target=Status.STOPPED,
        conditions=_conditions(nothing_in_flight, nothing_applied),
        permission="cases.lead_case",
        custom={"label": "Stop the work", "manual": True},
    )
    def stop(self):
        """Stop work on which nothing is in flight (revocation does the rest under its lock)."""

    @transition(
        field=status,
        source=[Status.APPLYING, Status.HELD],
        target=Status.STOPPED,
        custom={"label": "Revoked and settled: stopped"},
    )
    def settle_stopped(self):
        """Authority was revoked and what was in flight is settled with nothing applied."""

    def has_late_cancellation(self) -> bool:
        return self._has_cancellation("after_change")

    def _has_cancellation(self, outcome: str) -> bool:
        cancellations = self.read_with("cancellations")
        if cancellations is not None:
            return any(request.outcome == outcome for request in cancellations)
        return self.read_once(
            f"cancellation {outcome}",
            lambda: self.cancellations.filter(outcome=outcome).exists(),
        )

    @transition(
        field=status,
        source=Status.DONE,
        target=Status.PREPARING_PROPOSAL,
        conditions=_conditions(account_has_access, has_late_cancellation),
        custom={"label": "Propose reversal"},
    )
    def reopen_for_reversal(self):
        """The customer cancelled after the change was applied: a new, separate proposal."""


class CaseEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("Case events are append-only.")

    def delete(self):
        raise PermissionError("Case events are append-only.")


class CaseEvent(models.Model):
    """Append-only audit trail. Only services write it; nothing edits or deletes it."""

    # Not indexed alone: ``cases_event_chain_idx`` (case, id) answers every look by case.
    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="events", db_index=False)
    action = models.CharField(max_length=80, help_text="Namespaced code, e.g. cases.case.created")
    from_status = models.CharField(max_length=30, blank=True)
    to_status = models.CharField(max_length=30, blank=True)
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(
        max_length=120, help_text="Who or what acted: a username, a worker id, or 'system'."
    )
    version = models.PositiveIntegerField(help_text="The case version this event produced.")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # The case's hash chain (cases/audit.py): the previous event's hash, and SHA-256 over this
    # event's own fields and prev_hash. Set once by record_event.
    prev_hash = models.CharField(max_length=64, blank=True, editable=False)
    hash = models.CharField(max_length=64, editable=False)

    objects = CaseEventQuerySet.as_manager()

    class Meta:
        ordering = ["case", "id"]
        indexes = [
            models.Index(fields=["case", "version"]),
            # The chain's head: the case's latest event, read by every append.
            models.Index(fields=["case", "id"], name="cases_event_chain_idx"),
            # The events page filtered by action, counted: one action's events in case order,
            # merged with the team's cases by their key, stopping at the count's cap. With the
            # case's index alone, PostgreSQL weighed building a hash of every case of the team
            # (a quarter of the table) against that, and at 20k cases sometimes chose it.
            models.Index(fields=["action", "case"], name="event_action_case_idx"),
            # The events page's search (``cases.admin.search``) asks these for the reason and
            # the actor; the case reference through the cases' own index. An event insert costs
            # 0.06 ms more with both (10k single-row inserts; ``cases`` migration 0015).
            GinIndex(OpClass(Upper("reason"), name="gin_trgm_ops"), name="event_reason_trgm"),
            GinIndex(
                OpClass(Upper("actor_label"), name="gin_trgm_ops"), name="event_actor_label_trgm"
            ),
            # The case list's full-text search over the timeline (``cases.fulltext``).
            GinIndex(SearchVector("reason", config="english"), name="event_reason_fts"),
        ]
        # Related managers and the ORM's internals go through the append-only queryset too.
        base_manager_name = "objects"

    def __str__(self) -> str:
        # The case's reference, not its row id: the event page is titled by it.
        return f"{self.case.reference} v{self.version}: {self.action}"

    def save(self, *args, **kwargs):
        if self.pk is not None or not self._state.adding:
            raise PermissionError("Case events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("Case events are append-only.")


class AccountEvent(GuardedModel):
    """Append-only audit trail of a customer account itself: created, verified, its details
    changed, its access revoked. Written only by the account services
    (``cases.account_events.account_event_record``, under the account's row lock), in the same
    transaction as the change; each event is a link in its account's hash chain
    (``cases/audit.py``, checked by ``manage.py audit_verify``). Never changed or deleted
    (``cases.append_only``; a trigger on PostgreSQL, ``cases`` 0022)."""

    # Not indexed alone: ``account_event_chain_idx`` (account, id) answers every look by account.
    account = models.ForeignKey(
        CustomerAccount, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    action = models.CharField(
        max_length=80, help_text="cases.codes.AccountAction, e.g. cases.account.verified"
    )
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(
        max_length=120, help_text="Who or what acted: a username, a worker id, or 'system'."
    )
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    prev_hash = models.CharField(max_length=64, blank=True, editable=False)
    hash = models.CharField(max_length=64, editable=False)

    objects = GuardedQuerySet.as_manager()

    class Meta:
        ordering = ["account", "id"]
        indexes = [models.Index(fields=["account", "id"], name="account_event_chain_idx")]
        base_manager_name = "objects"

    def __str__(self) -> str:
        return f"{self.account_id} {self.action}"


class EvidenceReference(models.Model):
    """A pointer to permitted evidence in another system, never a copy of the messages."""

    class Source(models.TextChoices):
        ORDER_SYSTEM = "order_system", "Order system"
        EMAIL = "email", "Email"
        PHONE = "phone", "Phone call"
        CHAT = "chat", "Chat"
        CRM = "crm", "CRM"
        OTHER = "other", "Other"

    class Basis(models.TextChoices):
        CONTRACT = "contract", "Performance of the customer's contract"
        CONSENT = "consent", "Customer consent"
        LEGITIMATE_INTEREST = "legitimate_interest", "Legitimate interest"
        LEGAL_OBLIGATION = "legal_obligation", "Legal obligation"

    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="evidence")
    source_system = models.CharField(max_length=20, choices=Source.choices)
    external_reference = models.CharField(max_length=200)
    kind = models.CharField(max_length=60, help_text="e.g. order_read, customer_request")
    permitted_basis = models.CharField(max_length=30, choices=Basis.choices)
    captured_at = models.DateTimeField(default=timezone.now)
    summary = models.CharField(max_length=280)
    order_version = models.PositiveIntegerField(null=True, blank=True)
    recorded_by = models.CharField(max_length=120)

    class Meta:
        ordering = ["case", "-captured_at"]

    def __str__(self) -> str:
        return f"{self.source_system}:{self.external_reference}"

    @property
    def kind_words(self) -> str:
        """The kind as a person reads it: the workers' own kinds named, one a person typed
        ("customer_request") with its underscores as spaces."""
        return EVIDENCE_KIND_WORDS.get(self.kind) or self.kind.replace("_", " ").capitalize()


# What the workers record, in words (``EvidenceReference.kind``); a person's kind is free text.
EVIDENCE_KIND_WORDS = {
    "order_read": "The order as read",
    "order_event": "An event from the order system",
    "operation_applied": "The order system's answer: applied",
    "operation_replayed": "The order system's answer: applied before (a repeat)",
    "operation_lookup": "Found applied by the consistent lookup",
    "manual_settlement": "Settled by a person from evidence",
}


class CancellationRequest(models.Model):
    """A customer's request to cancel, kept as its own record: it is never shown as done
    until the case is proven to have nothing applied."""

    class Outcome(models.TextChoices):
        PENDING = "pending", "Pending: the outcome of a sent change is unknown"
        CANCELLED = "cancelled", "Cancelled: nothing was applied"
        ARRIVED_AFTER_CHANGE = "after_change", "Arrived after the change was applied"
        REFUSED = "refused", "Refused: the case was already closed"

    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="cancellations")
    reason = models.TextField()
    via = models.CharField(max_length=20, help_text="api, admin or system")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    requested_by_label = models.CharField(max_length=120)
    requested_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.PENDING)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["case", "requested_at"]

    def __str__(self) -> str:
        return f"Cancellation of {self.case_id} ({self.outcome})"


class Attempt(GuardedModel):
    """One worker's claim on a case (D-41-a1). Never reused; each carries a higher token.

    Its identity never changes and it is never deleted; only the columns in ``MUTABLE`` (its
    state, lease, heartbeat and confirmed steps) are written after the claim
    (``cases.append_only``; on PostgreSQL also a trigger and the app role's column grants).
    """

    MUTABLE = frozenset(
        {
            "state",
            "lease_expires_at",
            "heartbeat_at",
            "last_confirmed_step",
            "submitted_at",
            "last_error",
            "cancel_requested_at",
            "finished_at",
        }
    )

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed (definite answer, nothing left in flight)"
        EFFECT_UNKNOWN = "effect_unknown", "Effect unknown"
        LEASE_EXPIRED = "lease_expired", "Lease expired (worker missing)"
        CANCEL_REQUESTED = "cancel_requested", "Cancellation requested"
        STOPPED = "stopped", "Worker stopped"
        FENCED = "fenced", "Fenced (a newer owner exists)"

    ACTIVE = (State.RUNNING, State.CANCEL_REQUESTED)

    class Step(models.TextChoices):
        NONE = "", "Nothing confirmed"
        APPLIED = "applied", "Change applied at the order system"
        NOTIFIED = "notified", "Customer notified"
        CLOSED = "closed", "Case closed"

    # Not indexed alone: ``attempt_seq_per_case`` (case, sequence) answers every look by case.
    case = models.ForeignKey(
        Case, on_delete=models.PROTECT, related_name="attempts", db_index=False
    )
    operation = models.ForeignKey(
        "approvals.Operation", on_delete=models.PROTECT, related_name="attempts"
    )
    reference = models.CharField(max_length=30, unique=True)
    sequence = models.PositiveIntegerField()
    kind = models.CharField(max_length=20, default="apply")
    worker = models.CharField(max_length=120, help_text="host:pid of the claiming worker")
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The person who started it (supervised autonomy).",
    )
    fencing_token = models.BigIntegerField(unique=True)
    claimed_at = models.DateTimeField(default=timezone.now)
    lease_expires_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.RUNNING)
    last_confirmed_step = models.CharField(
        max_length=20, choices=Step.choices, default=Step.NONE, blank=True
    )
    submitted_at = models.DateTimeField(
        null=True, blank=True, help_text="When the write may have left for the order system."
    )
    last_error = models.TextField(blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = GuardedQuerySet.as_manager()

    class Meta:
        ordering = ["case", "sequence"]
        # Related managers and the ORM's internals go through the guarded queryset too.
        base_manager_name = "objects"
        constraints = [
            models.UniqueConstraint(fields=["case", "sequence"], name="attempt_seq_per_case"),
            models.UniqueConstraint(
                fields=["case"],
                condition=Q(state__in=["running", "cancel_requested"]),
                name="attempt_one_active_per_case",
            ),
        ]
        # No index names the lease or the heartbeat: a renewal (every heartbeat, and with the
        # send and the answer of each apply) then rewrites no index entry (PostgreSQL's HOT
        # update; the table keeps room on its pages for it, migration 0036). The watchdog's
        # query of active attempts whose lease ran out reads the few active ones through
        # attempt_one_active_per_case, as small as the number of running attempts. With an
        # index on the lease (attempt_active_lease_idx, until 0035), every renewal added a new
        # entry to each of the table's nine indexes.

    def __str__(self) -> str:
        return self.reference

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE


class SystemMarker(models.Model):
    """The database's identity and epoch. A worker remembers the epoch it saw outside the
    database; a database whose epoch went backwards was restored from a backup."""

    name = models.CharField(max_length=40, primary_key=True)
    identity = models.CharField(max_length=64)
    epoch = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name}: {self.identity} epoch {self.epoch}"


class HeldCase(Case):
    """The queue of held cases: a person must reconcile each from evidence."""

    class Meta:
        proxy = True
        verbose_name = "held case"
        verbose_name_plural = "Queue: held cases (reconcile from evidence)"


class AttentionCase(Case):
    """The queue of cases that need a person: attempts exhausted, invalid input, no access."""

    class Meta:
        proxy = True
        verbose_name = "case needing attention"
        verbose_name_plural = "Queue: cases needing attention"


# --- follow-up policies and notifications -------------------------------------------------------


class FollowUpPolicy(models.Model):
    """How long a person may take to answer a wait of one reason (for one change kind, or any).

    Leads edit them in the admin; the defaults live in settings (``FOLLOW_UP_MINUTES``). A
    policy applies to waits that start after it is saved: a running clock is never moved.
    """

    kind = models.CharField(
        max_length=40,
        blank=True,
        help_text="A change kind's code; empty: any kind without a policy of its own.",
    )
    reason = models.CharField(max_length=20, choices=WaitReason.choices)
    minutes = models.PositiveIntegerField(help_text="Follow-up time after the wait starts.")
    at_risk_percent = models.PositiveSmallIntegerField(
        default=25, help_text="The last part of the time, in percent, that shows as at risk."
    )
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["reason", "kind"]
        verbose_name = "follow-up policy"
        verbose_name_plural = "Follow-up policies"
        constraints = [
            models.UniqueConstraint(fields=["kind", "reason"], name="follow_up_policy_once"),
            models.CheckConstraint(
                condition=Q(minutes__gte=1), name="follow_up_policy_minutes_positive"
            ),
            models.CheckConstraint(
                condition=Q(at_risk_percent__gte=0, at_risk_percent__lte=99),
                name="follow_up_policy_risk_percent",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_reason_display()} ({self.kind or 'any kind'}): {self.minutes} min"


class NotificationKind(models.TextChoices):
    AWAITING_REVIEW = "awaiting_review", "A proposal awaits your decision"
    HELD = "held", "A case is held"
    NEEDS_ATTENTION = "needs_attention", "A case needs attention"
    REJECTED = "rejected", "A proposal was rejected"
    FOLLOW_UP_DUE = "follow_up_due", "A follow-up is due"
    DONE = "done", "A case you opened is done"
    CANCELLED = "cancelled", "A case you opened is cancelled"
    HANDED_OVER = "handed_over", "A case waiting on its owner passed to you, the backup"
    ASSIGNED = "assigned", "A case waiting on its owner was assigned to you"


class Notification(models.Model):
    """One person told of one case event: written in the event's own transaction
    (``cases.notify``), once per event and recipient, shown in the inbox and mailed by the
    workers (``cases.delivery``). The email's delivery never writes the case."""

    class Email(models.TextChoices):
        PENDING = "pending", "To be sent"
        SENDING = "sending", "Being sent"
        SENT = "sent", "Sent"
        DIGEST = "digest", "Waits for the daily digest"
        OFF = "off", "Email off for this kind"
        NO_ADDRESS = "no_address", "No email address on file"
        UNCERTAIN = "uncertain", "May have gone: its worker stopped mid-send (not sent again)"
        FAILED = "failed", "Not sent: the mail server kept refusing"

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="holdfast_notifications",
        db_index=False,  # ``notification_inbox_idx`` leads with it
    )
    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="notifications")
    event = models.ForeignKey(
        CaseEvent,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # ``notification_once_per_event_and_recipient`` leads with it
    )
    kind = models.CharField(max_length=20, choices=NotificationKind.choices)
    text = models.CharField(max_length=300, help_text="What happened, in plain words.")
    link = models.CharField(max_length=200, help_text="The page to open (a path).")
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)
    email_state = models.CharField(max_length=12, choices=Email.choices, default=Email.PENDING)
    email_due_at = models.DateTimeField(null=True, blank=True)
    email_attempts = models.PositiveIntegerField(default=0)
    email_sending_at = models.DateTimeField(null=True, blank=True)
    email_sent_at = models.DateTimeField(null=True, blank=True)
    email_last_error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["event", "recipient"], name="notification_once_per_event_and_recipient"
            ),
        ]
        indexes = [
            # The unread count in every admin page's header: one index-only count.
            models.Index(
                fields=["recipient"],
                condition=Q(read_at__isnull=True),
                name="notification_unread_idx",
            ),
            models.Index(fields=["recipient", "-created_at"], name="notification_inbox_idx"),
            # The delivery sweep: mail due, and sends whose worker may have died.
            models.Index(
                fields=["email_due_at"],
                condition=Q(email_state__in=["pending", "sending"]),
                name="notification_mail_due_idx",
            ),
            models.Index(
                fields=["recipient"],
                condition=Q(email_state="digest"),
                name="notification_digest_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.case_id} → {self.recipient_id}"


class NotificationPreference(models.Model):
    """A person's choice of email: off per kind of notification, and a daily digest instead
    of one mail each. Without a row: every kind by email, one mail each."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    email_off = models.JSONField(
        default=list, blank=True, help_text="Kinds of notification not sent by email."
    )
    digest = models.BooleanField(default=False, help_text="One mail a day instead of each.")
    digest_next_at = models.DateTimeField(
        null=True, blank=True, help_text="When the next daily digest is due."
    )

    class Meta:
        indexes = [
            models.Index(
                fields=["digest_next_at"], condition=Q(digest=True), name="preference_digest_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"Notification preferences of {self.user_id}"


class SavedView(models.Model):
    """A named filter of the case list (its query string): the person's own, or shared with
    one of their teams (``team``), which every member of that team then sees. Written by
    ``cases.saved_views`` only."""

    name = models.CharField(max_length=80)
    query = models.CharField(
        max_length=1000, blank=True, help_text="The case list's filters, as a query string."
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_case_views"
    )
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="saved_case_views",
        help_text="Shared with this team's members; empty: only its owner sees it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "name"],
                condition=Q(team__isnull=True),
                name="saved_view_personal_name",
            ),
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=Q(team__isnull=False),
                name="saved_view_team_name",
            ),
        ]

    def __str__(self) -> str:
        return self.name
