"""What Holdfast has verified about a connected order system, and the autonomy that follows.

One ``OrderSystemProfile`` row per probe run (history is kept); the latest row for
``settings.ORDER_SYSTEM_URL`` decides the autonomy (``reconciliation.selectors``). Only
``reconciliation.probe.order_system_probe`` writes these rows.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models.functions import Upper
from django.utils import timezone


class Autonomy(models.TextChoices):
    AUTONOMOUS = "autonomous", "Autonomous"
    SUPERVISED = "supervised", "Supervised"
    REVIEW_ONLY = "review_only", "Review only"


AUTONOMY_MEANING = {
    Autonomy.AUTONOMOUS: (
        "Workers may apply approved changes and may take over from a stopped worker: the order "
        "system was seen refusing repeats, stale versions, stale workers and expired approvals "
        "in the same step that applies a change."
    ),
    Autonomy.SUPERVISED: (
        "A person must start each apply, and nothing takes over automatically: the order system "
        "refuses repeats and stale versions, but not every other safeguard was seen working."
    ),
    Autonomy.REVIEW_ONLY: (
        "Workers check the order and prepare proposals only. People apply changes in the order "
        "system and record the evidence."
    ),
}

# Capability field → what it means when verified, in plain words.
CAPABILITIES = {
    "idempotent_replay": "repeating an operation returns the first result and changes nothing",
    "key_reuse_refused": "reusing an operation key for another change is refused (key_reused)",
    "fencing_enforced": "after a fence, an older worker's token is refused (stale_fencing_token)",
    "version_check": "a stale expected order version is refused (version_conflict)",
    "approval_expiry_enforced": (
        "an expired approval is refused (approval_expired) and a tampered one too "
        "(approval_invalid)"
    ),
    "consistent_lookup": "a just-applied operation is found by its key (GET /operations/{key})",
}


def autonomy_for(verified: dict[str, bool]) -> tuple[Autonomy, str]:
    """The autonomy a set of verified capabilities allows, with the reason in plain words.

    Autonomous only when every capability was verified. Supervised when repeats, key reuse and
    stale versions are refused, so a person-started apply cannot double-apply or overwrite, but
    something else is missing (fencing, approval checks, or the consistent lookup). Review only
    otherwise.
    """
    missing = [name for name in CAPABILITIES if not verified.get(name)]
    if not missing:
        return Autonomy.AUTONOMOUS, "Every capability was verified by probing."
    not_seen = "; ".join(CAPABILITIES[name] for name in missing)
    safe_to_apply = ("idempotent_replay", "key_reuse_refused", "version_check")
    if all(verified.get(name) for name in safe_to_apply):
        return Autonomy.SUPERVISED, f"Not verified: {not_seen}."
    return Autonomy.REVIEW_ONLY, f"Not verified: {not_seen}."


class OrderSystemProfile(models.Model):
    """The result of one probe run against one order system (append-only history)."""

    base_url = models.CharField(max_length=500)
    sandbox_order_id = models.CharField(max_length=100)
    reachable = models.BooleanField(
        default=False, help_text="Whether the order system answered the probe at all."
    )
    idempotent_replay = models.BooleanField(default=False)
    key_reuse_refused = models.BooleanField(default=False)
    fencing_enforced = models.BooleanField(default=False)
    version_check = models.BooleanField(default=False)
    approval_expiry_enforced = models.BooleanField(default=False)
    consistent_lookup = models.BooleanField(default=False)
    claimed = models.JSONField(
        default=dict,
        blank=True,
        help_text="What GET /capabilities claimed. Never trusted without the verified fields.",
    )
    evidence = models.JSONField(
        default=dict,
        blank=True,
        help_text="Per capability: verified, summary, and each request with status, error, ms.",
    )
    autonomy = models.CharField(
        max_length=20, choices=Autonomy.choices, default=Autonomy.REVIEW_ONLY
    )
    autonomy_reason = models.TextField(blank=True)
    kind_autonomy = models.JSONField(
        default=dict,
        blank=True,
        help_text="Per change kind code: the autonomy the probe proved for that kind (the "
        "system's autonomy when the kind is listed and its own checks passed, review-only "
        "otherwise). A kind not named here is review-only.",
    )
    probed_at = models.DateTimeField(default=timezone.now)
    probed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    probed_by_name = models.CharField(
        max_length=150,
        blank=True,
        help_text="Who ran the probe, kept when the user is deleted ('command line' if nobody).",
    )

    class Meta:
        ordering = ["-probed_at", "-id"]
        indexes = [models.Index(fields=["base_url", "-probed_at"], name="recon_profile_url_at")]
        permissions = [("run_probe", "Can run the order-system capability probe")]
        get_latest_by = ["probed_at", "id"]

    def __str__(self) -> str:
        return f"{self.base_url} — {self.get_autonomy_display()} ({self.probed_at:%Y-%m-%d %H:%M})"

    @property
    def verified(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in CAPABILITIES}

    @property
    def derived_autonomy(self) -> Autonomy:
        return autonomy_for(self.verified)[0]

    @property
    def meaning(self) -> str:
        return AUTONOMY_MEANING[Autonomy(self.autonomy)]

    @property
    def reason(self) -> str:
        return self.autonomy_reason

    @property
    def claimed_but_unverified(self) -> list[str]:
        """Capabilities the system claims (``/capabilities``) that the probe did not see."""
        return [
            name for name, ok in self.verified.items() if not ok and _claims(self.claimed, name)
        ]

    def derive_autonomy(self, kinds_verified: dict[str, bool] | None = None) -> None:
        """Set ``autonomy`` and ``autonomy_reason`` from the verified fields, and
        ``kind_autonomy`` from ``kinds_verified`` (kind code → its own checks passed), all in
        memory. A kind is never more autonomous than the system."""
        autonomy, reason = autonomy_for(self.verified)
        if not self.reachable:
            reason = "The order system did not answer the probe. " + reason
        self.autonomy, self.autonomy_reason = autonomy, reason
        self.kind_autonomy = {
            code: (autonomy if verified else Autonomy.REVIEW_ONLY).value
            for code, verified in (kinds_verified or {}).items()
        }

    def autonomy_of(self, code: str) -> Autonomy:
        """The autonomy the probe proved for change kind ``code``."""
        return Autonomy(self.kind_autonomy.get(code, Autonomy.REVIEW_ONLY))


# Names a ``/capabilities`` answer may use for each verified capability (the reference order
# system's names first).
CLAIM_NAMES = {
    "idempotent_replay": ("idempotency_keys", "idempotent_replay"),
    "key_reuse_refused": ("idempotency_keys", "key_reuse_refused"),
    "fencing_enforced": ("fencing", "fencing_enforced"),
    "version_check": ("version_check",),
    "approval_expiry_enforced": ("approval_grants", "approval_expiry_enforced"),
    "consistent_lookup": ("consistent_lookup",),
}


def _claims(claimed: object, name: str) -> bool:
    """Whether a ``/capabilities`` answer claims ``name``: ``{alias: true}`` or a list of names,
    at the top level or under ``"capabilities"``."""
    if isinstance(claimed, dict) and "capabilities" in claimed:
        claimed = claimed["capabilities"]
    aliases = CLAIM_NAMES.get(name, (name,))
    if isinstance(claimed, dict):
        return any(claimed.get(alias) is True for alias in aliases)
    if isinstance(claimed, list):
        return any(alias in claimed for alias in aliases)
    return False


# --- Inbound events from the order system (webhooks) -------------------------------------------


class InboundEvent(models.Model):
    """One order-system event, stored on receipt by its id; its processing is tracked apart.

    Receipt and processing are separate facts: a duplicate delivery only counts another receipt,
    and an event whose processing failed stays visible (``failed``, attempts, last error, next
    attempt) until a retry, a resend or a person gets it processed. Only
    ``reconciliation.inbound`` writes these rows.
    """

    class Processing(models.TextChoices):
        PENDING = "pending", "Pending"
        PROCESSED = "processed", "Processed"
        FAILED = "failed", "Failed"

    event_id = models.CharField(max_length=100, unique=True)
    type = models.CharField(max_length=60, help_text="e.g. order.updated")
    order_id = models.CharField(max_length=60, db_index=True)
    order_version = models.PositiveIntegerField()
    occurred_at = models.DateTimeField(help_text="When the order system says it happened.")
    body = models.JSONField(help_text="The event as received (the signed JSON, parsed).")
    received_at = models.DateTimeField(default=timezone.now, help_text="First receipt.")
    deliveries = models.PositiveIntegerField(
        default=1, help_text="Receipts of this event id, duplicates and resends included."
    )
    last_received_at = models.DateTimeField(default=timezone.now)
    processing = models.CharField(
        max_length=20, choices=Processing.choices, default=Processing.PENDING
    )  # indexed by ``recon_inbound_processing`` and ``recon_inbound_due`` (Meta)
    attempts = models.PositiveIntegerField(default=0, help_text="Processing attempts so far.")
    last_error = models.TextField(blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When processing is due (again); empty once processed or given up.",
    )
    outcome = models.TextField(blank=True, help_text="What processing did, per case.")
    account_reference = models.CharField(
        max_length=40,
        blank=True,
        db_index=True,
        help_text="The order's account as the order system reported it when the event was "
        "processed (never taken from the webhook); empty until then.",
    )
    # Our account of that reference, found when the reference was stored: who may see the event
    # (``inbound_events_for``) is decided by it, one index look per event. No constraint and no
    # index of its own: nothing reads events by account, and an account is removed only when
    # no case refers to it, when an event of it is nobody's to see anyway.
    account = models.ForeignKey(
        "cases.CustomerAccount",
        null=True,
        blank=True,
        editable=False,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        help_text="Our account that the reported account reference named when it was stored.",
    )
    # That account's team, stored with it: a case is opened in its account's team and neither
    # changes (``cases.services.case_open``; the account's team is read-only), so an event of
    # another team's account is nobody's of this team, and ``inbound_events_for`` passes over
    # it in the page's index without looking for a case. Empty for an event without an
    # account, and for one stored before the column was (reconciliation 0017 sets them): its
    # account's team is then read from the account.
    account_team = models.ForeignKey(
        "cases.Team",
        null=True,
        blank=True,
        editable=False,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
        help_text="The team of that account when it was stored (an account's team never changes).",
    )
    # Whether a case of that account is on the event's order: who may see the event is decided
    # by it (``inbound_events_for``), read in the page's indexes, where it was a look for a case
    # per event (counting a lead's failed events at 1M cases looked 1,042 times, 9 ms, against
    # a few at 10k). A case is never deleted and keeps its order and account, so once true it
    # stays true. Set with the account (``inbound._set_account``) and, when such a case opens
    # later, by ``inbound.inbound_events_on_case`` after that commits; each of the two asks
    # again after its own commit, so whichever of a case's opening and an event's processing
    # commits last sees the other's. Empty for an event stored before the column was
    # (reconciliation 0018 sets them): a look for a case decides for it.
    on_case = models.BooleanField(
        null=True,
        blank=True,
        editable=False,
        help_text="A case of the event's account is on its order (empty: not known yet).",
    )

    class Meta:
        ordering = ["-received_at", "-id"]
        # An operator's: the events no team owns yet (``selectors.inbound_events_for``).
        permissions = [
            ("view_unowned_inboundevent", "Can see inbound events no team owns yet"),
        ]
        indexes = [
            models.Index(fields=["processing", "next_attempt_at"], name="recon_inbound_due"),
            # The inbound events page: its order (newest first), and its search field by
            # field (``cases.admin.search``) through each field's trigram index. Both page
            # indexes carry the order, the account and its team, which ``inbound_events_for``
            # checks for every event a page counts: read from the index alone (no look in the
            # table), counting the failed events a lead may see at 1M cases took 11.7 ms,
            # against 25.2 ms through a scan of the table (0015; SQLite ignores the included
            # columns). The team passes over other teams' events without a look for a case
            # (0017); whether a case is on the event's order answers the rest with no look for
            # a case (0018).
            models.Index(
                fields=["received_at", "id"],
                include=["order_id", "account_id", "account_team_id", "on_case"],
                name="recon_inbound_received",
            ),
            # The page filtered by processing (failed, pending), newest first (0011).
            models.Index(
                fields=["processing", "received_at", "id"],
                include=["order_id", "account_id", "account_team_id", "on_case"],
                name="recon_inbound_processing",
            ),
            GinIndex(
                OpClass(Upper("event_id"), name="gin_trgm_ops"), name="recon_inbound_event_trgm"
            ),
            GinIndex(
                OpClass(Upper("order_id"), name="gin_trgm_ops"), name="recon_inbound_order_trgm"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} ({self.order_id} v{self.order_version}, {self.processing})"
