"""OpenAPI links between the API's operations (a drf-spectacular postprocessing hook).

A link says where a value of one answer goes next: the ``reference`` of an opened case is the
path of reading it, moving it, cancelling it and preparing its proposal; a proposal's ``id``
is the path of approving or rejecting it. Generated clients document them, and schemathesis
follows them in its stateful runs.
"""

from __future__ import annotations

from typing import Any

_CASE = {"reference": "$response.body#/reference"}
_PROPOSAL = {"id": "$response.body#/id"}
_FIRST_PROPOSAL = {"id": "$response.body#/results/0/id"}
_FIRST_CASE = {"reference": "$response.body#/results/0/reference"}

_CASE_LINKS = {
    "ReadCase": ("cases_retrieve", _CASE, "Read the case."),
    "MoveCase": ("cases_transitions_create", _CASE, "Move the case by hand."),
    "CancelCase": ("cases_cancel_create", _CASE, "Cancel the case."),
    "PrepareProposal": ("cases_proposals_create", _CASE, "Prepare its proposal by hand."),
}
_PROPOSAL_LINKS = {
    "ReadProposal": ("proposals_retrieve", _PROPOSAL, "Read the proposal."),
    "ApproveProposal": ("proposals_approve_create", _PROPOSAL, "Approve the proposal."),
    "RejectProposal": ("proposals_reject_create", _PROPOSAL, "Reject the proposal."),
}

# (operationId, status) -> the links of that answer.
LINKS: dict[tuple[str, str], dict[str, tuple[str, dict[str, str], str]]] = {
    ("cases_create", "201"): _CASE_LINKS,
    ("cases_create", "200"): _CASE_LINKS,
    ("cases_retrieve", "200"): _CASE_LINKS,
    ("cases_transitions_create", "200"): _CASE_LINKS,
    ("cases_cancel_create", "200"): _CASE_LINKS,
    ("cases_proposals_create", "201"): _CASE_LINKS,
    ("cases_list", "200"): {
        "ReadFirstCase": ("cases_retrieve", _FIRST_CASE, "Read the first case listed.")
    },
    ("proposals_list", "200"): {
        name: (operation, _FIRST_PROPOSAL, f"{text[:-1]} listed first.")
        for name, (operation, _, text) in _PROPOSAL_LINKS.items()
    },
    ("proposals_retrieve", "200"): _PROPOSAL_LINKS,
    ("proposals_approve_create", "200"): _PROPOSAL_LINKS,
    ("proposals_reject_create", "200"): _PROPOSAL_LINKS,
}


def add_links(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """Add ``LINKS`` to the answers of the schema ``result``."""
    for item in result.get("paths", {}).values():
        for operation in item.values():
            for status, response in operation.get("responses", {}).items():
                links = LINKS.get((operation.get("operationId"), status))
                if links:
                    response["links"] = {
                        name: {
                            "operationId": target,
                            "parameters": dict(parameters),
                            "description": description,
                        }
                        for name, (target, parameters, description) in links.items()
                    }
    return result
