"""Tasks for ``make bench`` (``manage.py bench_hot_paths``) only: what a worker cluster costs
with nothing of Holdfast's in the task (``noop``), and what the order system's writes cost sent
with nothing of Holdfast's around them (``bare_writes``)."""

from __future__ import annotations

from typing import Any


def noop() -> None:
    """Do nothing: the time a worker cluster needs per task is then all overhead."""


def bare_writes(writes: list[dict[str, Any]]) -> int:
    """Send each write to the order system, one after another, through the process's shared
    client: no claim, no attempt, no lease, nothing read or recorded in Holdfast. The rate of
    the same backlog sent this way is the end-to-end safe apply's ceiling on this machine."""
    from reconciliation.client import OrderSystemClient

    client = OrderSystemClient.from_settings()
    for write in writes:
        client.apply_operation(
            write["order_id"],
            operation_key=write["operation_key"],
            change=write["change"],
            expected_version=write["expected_version"],
            fencing_token=write["fencing_token"],
            approval_grant=write["approval_grant"],
        )
    return len(writes)
