"""The order system's own records. Only ``orders.services`` (and the fault/outbox modules) write."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Account(models.Model):
    account_id = models.CharField(primary_key=True, max_length=64)
    name = models.CharField(max_length=200)
    access_active = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.account_id


class Order(models.Model):
    """An order; ``fence_token`` is the highest fencing token seen for it (the fence).

    Invariants: ``version`` grows by exactly one per applied operation, ``fence_token`` never
    decreases, and only an ``open`` order is changed by an operation (a cancelled one never
    again). ``shipping_address`` is ``{name, line1, line2, city, postal_code, country}``
    (``line2`` "" when there is none) or ``None`` when none is on record; ``extra`` holds the
    values of plug-in change kinds (``orders.kinds``).
    """

    class Status(models.TextChoices):
        OPEN = "open"
        SHIPPED = "shipped"
        CANCELLED = "cancelled"

    order_id = models.CharField(primary_key=True, max_length=64)
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="orders")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    delivery_date = models.DateField()
    shipping_address = models.JSONField(null=True, blank=True)
    extra = models.JSONField(default=dict, blank=True)
    version = models.PositiveIntegerField(default=1)
    fence_token = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return self.order_id

    def as_json(self) -> dict:
        """The contract's fields (``GET /orders/{id}`` adds the plug-in kinds' own)."""
        return {
            "order_id": self.order_id,
            "account_id": self.account_id,
            "version": self.version,
            "status": self.status,
            "delivery_date": self.delivery_date.isoformat(),
            "shipping_address": self.shipping_address,
        }


class Slot(models.Model):
    """Delivery capacity for one date. Invariant: ``0 <= taken <= capacity`` after every apply."""

    date = models.DateField(unique=True)
    capacity = models.PositiveIntegerField(default=0)
    taken = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["date"]

    def __str__(self) -> str:
        return f"{self.date} {self.taken}/{self.capacity}"

    def as_json(self) -> dict:
        return {"date": self.date.isoformat(), "capacity": self.capacity, "taken": self.taken}


class AppliedOperation(models.Model):
    """One applied operation by its idempotency key, with the first answer given for it."""

    operation_key = models.CharField(max_length=200, unique=True)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="operations")
    body_hash = models.CharField(max_length=64)
    change = models.JSONField()
    status = models.CharField(max_length=20, default="applied")
    order_version = models.PositiveIntegerField()
    fencing_token = models.BigIntegerField()
    approval_id = models.CharField(max_length=200)
    result = models.JSONField()
    created_at = models.DateTimeField()
    # The lagging search index only shows the operation from this moment on.
    searchable_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.operation_key

    def as_json(self) -> dict:
        return {
            "operation_key": self.operation_key,
            "order_id": self.order_id,
            "status": self.status,
            "order_version": self.order_version,
            "change": self.change,
        }


class OutboxEvent(models.Model):
    """A webhook waiting for (or past) delivery; written in the transaction of the change."""

    event_id = models.CharField(max_length=64, unique=True)
    type = models.CharField(max_length=40, default="order.updated")
    order_id = models.CharField(max_length=64)
    order_version = models.PositiveIntegerField()
    occurred_at = models.DateTimeField()
    payload = models.JSONField()
    delivered_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(delivered_at__isnull=True),
                name="orders_outbox_due",
            )
        ]

    def __str__(self) -> str:
        return self.event_id

    def as_json(self) -> dict:
        return {
            "event_id": self.event_id,
            "type": self.type,
            "order_id": self.order_id,
            "order_version": self.order_version,
            "occurred_at": self.payload["occurred_at"],
            "delivered_at": self.delivered_at.isoformat() if self.delivered_at else None,
            "attempts": self.attempts,
            "next_attempt_at": self.next_attempt_at.isoformat(),
            "last_error": self.last_error,
        }


class TestingReset(models.Model):
    """One row per ``POST /_testing/reset`` (faults enabled only): the world a request began in.

    A request an injected ``latency`` holds may outlive the test that sent it; if the system
    was reset while it waited, it is answered 503 and never runs on the next test's rows."""

    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"reset {self.pk} at {self.at:%Y-%m-%d %H:%M:%S}"


class FaultRule(models.Model):
    """An injected fault; ``remaining`` counts matching calls left (``None``: until cleared)."""

    class Kind(models.TextChoices):
        DROP_AFTER_COMMIT = "drop_after_commit"
        DELAY_AFTER_COMMIT = "delay_after_commit"
        FAIL_BEFORE_COMMIT = "fail_before_commit"
        UNAVAILABLE = "unavailable"
        LATENCY = "latency"
        SEARCH_LAG = "search_lag"

    kind = models.CharField(max_length=32, choices=Kind.choices)
    path_prefix = models.CharField(max_length=200, default="/")
    remaining = models.PositiveIntegerField(null=True, blank=True)
    seconds = models.FloatField(default=0.0)
    retry_after = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.path_prefix}"

    def as_json(self) -> dict:
        return {
            "id": self.pk,
            "kind": self.kind,
            "path_prefix": self.path_prefix,
            "times": self.remaining,
            "seconds": self.seconds,
            "retry_after": self.retry_after,
        }
