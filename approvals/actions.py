"""The approvals' case action, registered on the kernel's list (see ``cases.actions``)."""

from __future__ import annotations

from cases.actions import CaseAction, register
from cases.models import Status

register(
    CaseAction(
        name="prepare",
        label="Prepare a proposal by hand",
        words="prepare a proposal by hand (e.g. a change the customer confirmed by phone)",
        permission="cases.work_case",
        available=lambda case: (
            case.status
            in {
                Status.PREPARING_PROPOSAL,
                Status.AWAITING_REVIEW,
                Status.PROPOSAL_REJECTED,
                Status.READY,
            }
        ),
        form="prepare",
        order=70,
    )
)
