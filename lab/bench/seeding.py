"""Ready cases written as rows, for the benchmarks (``benchmark`` and ``bench``).

A claim reads a ready case with an approved proposal, its operation and a live approval; these
are written directly (no intake, no source check, no decision), because what is measured is the
claim, not how a case got there. Never used by the product or the tests' workflow.
"""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import User

from approvals.models import Approval, Operation, Proposal
from cases.models import Case, CustomerAccount, Status


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
        requested_date=now.date(),
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
        delivery_date=case.requested_date,
    )
    proposal = Proposal.objects.create(
        case=case,
        order_id=case.order_id,
        delivery_date=case.requested_date,
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
