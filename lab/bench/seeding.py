"""The bench's rows: ready cases written as rows (``bench_hot_paths`` and ``bench_large_table``),
the account and people they belong to, and the state of the bench database between
measurements.

A claim reads a ready case with an approved proposal, its operation and a live approval; these
are written directly (no intake, no source check, no decision), because what is measured is the
claim, not how a case got there. Never used by the product or the tests' workflow.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from approvals.models import Approval, Operation, Proposal
from cases import kinds
from cases.kinds import change_hash
from cases.models import Case, CustomerAccount, Status

if TYPE_CHECKING:
    from lab.bench.context import Run


def delivery_change(day: dt.date) -> dict[str, str]:
    """The bench's change of the delivery date kind (the claims' cases carry it)."""
    return {"kind": "delivery_date", "delivery_date": day.isoformat()}


# The kinds the end-to-end rounds apply, in turn (``--e2e-kinds``).
E2E_KINDS = ("delivery_date", "shipping_address", "order_cancellation")


def kind_change(code: str, day: dt.date, n: int) -> dict[str, Any]:
    """The end-to-end backlog's change number ``n`` of kind ``code``: a delivery on ``day``, an
    address of its own, or a cancellation (every order is open when seeded)."""
    if code == "delivery_date":
        return delivery_change(day)
    if code == "shipping_address":
        return {
            "kind": code,
            "address": {
                "name": f"Bench customer {n}",
                "line1": f"{n} Bench Street",
                "city": "Leeds",
                "postal_code": f"LS{n % 10} 1BE",
                "country": "GB",
            },
        }
    if code == "order_cancellation":
        return {"kind": code, "reason_code": "customer_request"}
    raise ValueError(f"the bench has no change of kind {code!r} (it knows {', '.join(E2E_KINDS)})")


def ready_case_seed(
    *,
    tag: str,
    number: int,
    account: CustomerAccount,
    owner: User,
    approver: User,
    now: dt.datetime,
    reference: str,
) -> Case:
    """One ready case on order ``ORD-{tag}`` with operation ``DATE-{tag}-1`` and approval
    ``AP-{tag}``, valid for an hour from ``now``."""
    case = Case.objects.create(
        reference=reference,
        number=number,
        account=account,
        request_key=f"bench-{tag}",
        order_id=f"ORD-{tag}",
        kind="delivery_date",
        change=delivery_change(now.date()),
        team=account.team,
        owner=owner,
        last_checked_order_version=1,
    )
    Case.objects.filter(pk=case.pk).update(status=Status.READY)
    operation = Operation.objects.create(
        case=case,
        key=f"DATE-{tag}-1",
        sequence=1,
        order_id=case.order_id,
        change=case.change,
        change_hash=change_hash(case.change),
    )
    proposal = Proposal.objects.create(
        case=case,
        order_id=case.order_id,
        change=case.change,
        evidence_order_version=1,
        content_hash="bench",
        operation=operation,
        prepared_by_label="bench",
        status=Proposal.Status.APPROVED,
    )
    Approval.objects.create(
        reference=f"AP-{tag}",
        proposal=proposal,
        proposal_hash="bench",
        operation=operation,
        decided_by=approver,
        decision="approved",
        expires_at=now + dt.timedelta(hours=1),
        grant="bench",
    )
    return case


def fixture(run: Run) -> dict[str, Any]:
    """An account, users and an autonomous order system profile for ready cases (made once per
    run)."""
    if run.fixture:
        return run.fixture
    from cases.models import Team
    from cases.roles import ensure_roles
    from reconciliation.models import OrderSystemProfile

    ensure_roles()
    users = get_user_model().objects
    owner = users.create(username=f"bench-owner-{run.run_id}")
    approver = users.create(username=f"bench-approver-{run.run_id}")
    # One team for every run on this database, whose case numbers go on from the last run's
    # (the backlog's cases take the references and keys intake would give them).
    team, _ = Team.objects.get_or_create(name="Bench", defaults={"default_owner": owner})
    account = CustomerAccount.objects.create(
        reference=f"ACC-BENCH-{run.run_id}",
        name="Bench",
        team=team,
        verified=True,
        # A customer with an address, as a real one has: each apply tells them (the
        # notification's start, the send, its confirmation with the close).
        email=f"customer-{run.run_id}@bench.example",
    )
    from reconciliation.selectors import current_autonomy

    if not current_autonomy().is_autonomous:  # the live order system's probe said so
        bench_profile(OrderSystemProfile, settings.ORDER_SYSTEM_SANDBOX_ORDERS[0], "bench fixture")
    run.fixture.update(owner=owner, approver=approver, team=team, account=account, next=0)
    return run.fixture


def bench_profile(model: Any, sandbox_order_id: str, reason: str) -> None:
    """An autonomous profile for the claims measured without a live order system."""
    model.objects.create(
        base_url=settings.ORDER_SYSTEM_URL.rstrip("/"),
        sandbox_order_id=sandbox_order_id,
        reachable=True,
        idempotent_replay=True,
        key_reuse_refused=True,
        fencing_enforced=True,
        version_check=True,
        approval_expiry_enforced=True,
        consistent_lookup=True,
        autonomy="autonomous",
        autonomy_reason=reason,
        kind_autonomy=dict.fromkeys(kinds.codes(), "autonomous"),  # every kind the bench drives
    )


def ready_cases(run: Run, count: int, *, due: bool = False) -> list[int]:
    """``count`` ready cases with an approved proposal, written as rows (this is what a
    claim reads); ``due``: due now, for a next-due claim. Statistics refreshed after."""
    from cases.references import case_number_next

    fx = fixture(run)
    now = timezone.now()
    ready = []
    with transaction.atomic():
        for _ in range(count):
            n = fx["next"] = fx["next"] + 1
            tag = f"{run.run_id}-{n}"
            case = ready_case_seed(
                tag=f"B{tag}",
                reference=f"BENCH-{tag}",
                number=case_number_next(fx["account"].team)[0],  # the numbers intake uses
                account=fx["account"],
                owner=fx["owner"],
                approver=fx["approver"],
                now=now,
            )
            ready.append(case.pk)
        if due:
            Case.objects.filter(pk__in=ready).update(next_check_at=now - dt.timedelta(seconds=1))
    analyze()
    return ready


# --- the database between measurements ----------------------------------------------------


def analyze() -> None:
    """What autovacuum would do for the tables the bench writes (it is off here): fresh
    planner statistics (without them the claim's approval lookup walks every live approval)
    and no dead row versions left in their indexes by earlier rounds."""
    from django_q.models import OrmQ

    from cases.models import Attempt, CancellationRequest, CaseEvent, CounterRow, SystemMarker

    models = (
        Case,
        CaseEvent,
        Attempt,
        CancellationRequest,
        CounterRow,
        SystemMarker,
        Proposal,
        Operation,
        Approval,
        OrmQ,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "VACUUM (ANALYZE) "
            + ", ".join(connection.ops.quote_name(m._meta.db_table) for m in models)
        )


def quiet() -> None:
    """Nothing left due from earlier runs or rounds: no case the sweeper would dispatch or a
    next-due claim would take first, no active attempt whose lease would run out."""
    from cases.models import Attempt

    now = timezone.now()
    far = now + dt.timedelta(days=3650)
    Case.objects.exclude(next_check_at=None).update(next_check_at=None)
    # Only leases that could run out within a year: one pushed far by an earlier call stays
    # (comparing with ``far`` rewrote every leftover attempt each time, 70k rows a run).
    Attempt.objects.filter(
        state__in=Attempt.ACTIVE, lease_expires_at__lt=now + dt.timedelta(days=365)
    ).update(lease_expires_at=far)


def neutralise(case_ids: list[int]) -> None:
    """Claimed bench cases never wake the watchdog or the dispatcher of a later cluster."""
    from cases.models import Attempt

    far = timezone.now() + dt.timedelta(days=3650)
    Attempt.objects.filter(case_id__in=case_ids).update(lease_expires_at=far)
    Case.objects.filter(pk__in=case_ids).update(next_check_at=None)
