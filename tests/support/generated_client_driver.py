"""Drives a client that ``openapi-python-client`` generated from Holdfast's schema, as an
integrator would: intake with the integration's token, the approver's queue and approval with
an approver's token, then the case read back until it is done. Run as a separate process by
``tests/test_api_generated_client.py``; it imports only the generated package (unpatched).

Arguments: ``CLIENT_DIR BASE_URL INTAKE_TOKEN APPROVER_TOKEN ACCOUNT ORDER_ID DATE``. Prints
one JSON object per step on standard output; exits non-zero at the first unexpected answer.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time

TIMEOUT_SECONDS = 45.0


def step(name: str, **facts) -> None:
    print(json.dumps({"step": name, **facts}), flush=True)


def fail(name: str, response) -> None:
    step(name, failed=True, status=int(response.status_code), body=response.content.decode())
    sys.exit(1)


def main(client_dir, base_url, intake_token, approver_token, account, order_id, date) -> None:
    sys.path.insert(0, client_dir)
    # The generated package exists only once the test has generated it.
    from holdfast_client import AuthenticatedClient  # type: ignore[import-not-found]
    from holdfast_client.api.cases import (  # type: ignore[import-not-found]
        cases_create,
        cases_retrieve,
    )
    from holdfast_client.api.proposals import (  # type: ignore[import-not-found]
        proposals_approve_create,
        proposals_list,
    )
    from holdfast_client.models import (  # type: ignore[import-not-found]
        ApproveRequest,
        DeliveryDateCaseIntakeKindEnum,
        DeliveryDateCaseIntakeRequest,
        DeliveryDateChangeRequest,
        ProposalsListStatus,
    )

    intake = AuthenticatedClient(base_url=base_url, token=intake_token, prefix="Token")
    approver = AuthenticatedClient(base_url=base_url, token=approver_token, prefix="Token")
    deadline = time.monotonic() + TIMEOUT_SECONDS

    body = DeliveryDateCaseIntakeRequest(
        account=account,
        request_key=f"generated-client-{order_id}",
        order_id=order_id,
        kind=DeliveryDateCaseIntakeKindEnum.DELIVERY_DATE,
        change=DeliveryDateChangeRequest(delivery_date=dt.date.fromisoformat(date)),
        note="Opened through the generated client.",
    )
    response = cases_create.sync_detailed(client=intake, body=body)
    if response.status_code != 201:
        fail("intake", response)
    reference = response.parsed.reference
    step("intake", status=201, reference=reference, case_status=str(response.parsed.status))

    proposal = None
    while proposal is None:
        response = proposals_list.sync_detailed(
            client=approver, status=ProposalsListStatus.AWAITING_REVIEW
        )
        if response.status_code != 200:
            fail("queue", response)
        proposal = next((p for p in response.parsed.results if p.case == reference), None)
        if proposal is None:
            if time.monotonic() > deadline:
                step("queue", failed=True, reason="no proposal reached the approver's queue")
                sys.exit(1)
            time.sleep(0.2)
    step("queue", proposal=proposal.id, may_decide=proposal.may_decide)

    response = proposals_approve_create.sync_detailed(
        proposal.id, client=approver, body=ApproveRequest()
    )
    if response.status_code != 200:
        fail("approve", response)
    step("approve", status=200, proposal_status=str(response.parsed.status))

    while True:
        response = cases_retrieve.sync_detailed(reference, client=intake)
        if response.status_code != 200:
            fail("case", response)
        status = str(response.parsed.status)
        if status == "done" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    step("done", case_status=status, operations=[op.key for op in response.parsed.operations])
    sys.exit(0 if status == "done" else 1)


if __name__ == "__main__":
    main(*sys.argv[1:])
