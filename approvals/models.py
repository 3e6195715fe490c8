"""Proposals bound to one exact intended change, the operations they mint, and approvals.

Identities never mix: a proposal is one exact change resting on named evidence; an operation
(``{its kind's key prefix}-41-1``) is the receiver's idempotency key for one exact intended
change and survives re-approval, retries and takeovers; an approval (AP-9) is one person's
decision on one proposal, by id and content hash, with an expiry.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from cases import kinds
from cases.append_only import GuardedModel, GuardedQuerySet, in_maintenance
from cases.models import Case, CaseEvent


class Operation(models.Model):
    """The idempotency key the order system sees. One per exact intended change of a case:
    ``change`` whole, in its kind's canonical form, and ``change_hash`` its identity."""

    # Not indexed alone: ``operation_seq_per_case`` (case, sequence) answers every look by case.
    case = models.ForeignKey(
        Case, on_delete=models.PROTECT, related_name="operations", db_index=False
    )
    key = models.CharField(max_length=40, unique=True)
    sequence = models.PositiveIntegerField(
        help_text="1 for {key prefix}-41-1, 2 for {key prefix}-41-2 …"
    )
    order_id = models.CharField(max_length=60)
    change = models.JSONField(default=dict, help_text="The exact change, as sent and signed.")
    change_hash = models.CharField(
        max_length=64, help_text="SHA-256 of the change's canonical JSON (``cases.kinds``)."
    )
    created_at = models.DateTimeField(default=timezone.now)
    confirmed_at = models.DateTimeField(
        null=True, blank=True, help_text="When the order system's answer proved it applied."
    )
    result_order_version = models.PositiveIntegerField(null=True, blank=True)
    notified_at = models.DateTimeField(
        null=True, blank=True, help_text="When the customer was told the change is applied."
    )
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="Superseded by a changed intent: never used again."
    )

    class Meta:
        ordering = ["case", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["case", "sequence"], name="operation_seq_per_case"),
            models.UniqueConstraint(
                fields=["case", "order_id", "change_hash"],
                condition=Q(retired_at__isnull=True),
                name="operation_one_live_per_change",
            ),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def kind(self) -> kinds.ChangeKind:
        return kinds.kind_of(self.change)

    @property
    def description(self) -> str:
        """The exact change in plain words (its kind's ``describe``)."""
        return kinds.describe(self.change)


class Proposal(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        AWAITING_REVIEW = "awaiting_review", "Awaiting review"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        SUPERSEDED = "superseded", "Superseded by a changed intent"
        INVALIDATED = "invalidated", "Invalidated: the source changed"
        WITHDRAWN = "withdrawn", "Withdrawn"

    OPEN = (Status.DRAFT, Status.AWAITING_REVIEW, Status.APPROVED)

    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="proposals")
    order_id = models.CharField(max_length=60)
    change = models.JSONField(
        default=dict, help_text="The exact change, whole, in its kind's canonical form."
    )
    evidence_order_version = models.PositiveIntegerField(
        help_text="The order version the proposal rests on."
    )
    evidence_ids = models.JSONField(default=list, help_text="Evidence references it rests on.")
    advisory_note = models.CharField(
        max_length=300,
        blank=True,
        help_text="The kind's advice for the approver, read when the proposal was prepared.",
    )
    content_hash = models.CharField(max_length=64)
    operation = models.ForeignKey(
        Operation, on_delete=models.PROTECT, null=True, blank=True, related_name="proposals"
    )
    prepared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="prepared_proposals",
    )
    prepared_by_label = models.CharField(max_length=120)
    status = models.CharField(
        max_length=20, choices=Status.choices, default=Status.DRAFT, db_index=True
    )
    status_reason = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["case", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["case"],
                condition=Q(status__in=["draft", "awaiting_review", "approved"]),
                name="proposal_one_open_per_case",
            ),
        ]
        permissions = [("approve_proposal", "Can approve or reject proposals of their teams")]

    def __str__(self) -> str:
        return f"Proposal #{self.pk} for {self.case.reference}: {self.description}"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN

    @property
    def kind(self) -> kinds.ChangeKind:
        return kinds.kind_of(self.change)

    @property
    def description(self) -> str:
        """The exact change in plain words (its kind's ``describe``)."""
        return kinds.describe(self.change)


class ProposalAuthor(GuardedModel):
    """A person who authored the intent a proposal carries, and so may never approve it.

    Four eyes binds people, not rows: whoever opened the case (when a person did), joined its
    request by re-sending it, changed the change it asks for, prepared the proposal by hand or
    asked for it to be prepared again is an author. Rows are written with the proposal, from
    the case's own audit events; a database trigger refuses an approval decided by any of them
    (migration 0005). Append-only: a row is never changed or deleted (``cases.append_only``;
    a trigger on PostgreSQL).
    """

    class Role(models.TextChoices):
        OPENED_CASE = "opened_case", "Opened the case"
        JOINED_REQUEST = "joined_request", "Re-sent the case's request (asked for it too)"
        CHANGED_INTENT = "changed_intent", "Changed the requested change"
        PREPARED = "prepared", "Prepared the proposal"
        ASKED_REPREPARE = "asked_reprepare", "Asked for the proposal to be prepared again"

    proposal = models.ForeignKey(Proposal, on_delete=models.PROTECT, related_name="authors")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    role = models.CharField(max_length=20, choices=Role.choices)
    event = models.ForeignKey(
        CaseEvent,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The audit event that made this person an author (none for the preparer).",
    )
    recorded_at = models.DateTimeField(default=timezone.now)

    objects = GuardedQuerySet.as_manager()

    class Meta:
        ordering = ["proposal", "pk"]
        base_manager_name = "objects"
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "user", "role"], name="proposal_author_once_per_role"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.role} proposal #{self.proposal_id}"


class ApprovalQuerySet(GuardedQuerySet):
    def update(self, **kwargs):
        """Only the revocation, and only of approvals not yet revoked: it goes from empty to
        set once (the database's trigger refuses a second one on PostgreSQL)."""
        rows = self if in_maintenance() else self.filter(revoked_at__isnull=True)
        return GuardedQuerySet.update(rows, **kwargs)


class Approval(GuardedModel):
    """One decision on one exact proposal. Approvals expire; an expired one never authorizes.

    A decision is never rewritten or deleted: only its revocation is written later, once
    (``cases.append_only``; migration 0006 on PostgreSQL).
    """

    MUTABLE = frozenset({"revoked_at", "revoked_reason"})

    class Decision(models.TextChoices):
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    reference = models.CharField(max_length=20, unique=True)
    proposal = models.ForeignKey(Proposal, on_delete=models.PROTECT, related_name="approvals")
    proposal_hash = models.CharField(max_length=64, help_text="The content hash decided on.")
    operation = models.ForeignKey(
        Operation, on_delete=models.PROTECT, null=True, blank=True, related_name="approvals"
    )
    prepared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Copied from the proposal so the database can refuse self-approval.",
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="decisions"
    )
    decision = models.CharField(max_length=10, choices=Decision.choices)
    reason = models.TextField(blank=True)
    decided_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=200, blank=True)
    grant = models.TextField(blank=True, help_text="The signed grant the order system checks.")

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["-decided_at"]
        base_manager_name = "objects"
        constraints = [
            models.CheckConstraint(
                condition=Q(prepared_by__isnull=True) | ~Q(decided_by=F("prepared_by")),
                name="approval_not_by_preparer",
            ),
            models.CheckConstraint(
                condition=Q(decision="rejected") | Q(expires_at__isnull=False),
                name="approval_has_expiry",
            ),
            models.UniqueConstraint(
                fields=["proposal"],
                condition=Q(decision="approved", revoked_at__isnull=True),
                name="approval_one_live_per_proposal",
            ),
        ]

    def __str__(self) -> str:
        return self.reference

    def is_live(self, now=None) -> bool:
        now = now or timezone.now()
        return (
            self.decision == self.Decision.APPROVED
            and self.revoked_at is None
            and self.expires_at is not None
            and self.expires_at > now
        )
