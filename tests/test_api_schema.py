"""The published schema is one a client can be generated from: JSON bodies only (as the
parsers), an own summary and description per operation, every error field declared, and the
patterns of the schema the very rules the server enforces."""

from __future__ import annotations

import re

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.settings import api_settings

from cases import validation
from cases.api_errors import ErrorSerializer


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def _operations(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def test_request_bodies_are_json_only_as_the_parsers(schema):
    parsers = {parser.media_type for parser in api_settings.DEFAULT_PARSER_CLASSES}
    assert parsers == {"application/json"}
    for label, operation in _operations(schema):
        if "requestBody" in operation:
            assert set(operation["requestBody"]["content"]) == {"application/json"}, label


def test_every_operation_has_its_own_summary_and_description(schema):
    descriptions = {}
    for label, operation in _operations(schema):
        assert operation.get("summary"), label
        assert operation.get("description"), label
        assert "throttle" not in operation["description"].lower(), label
        descriptions.setdefault(operation["description"], []).append(label)
    assert [labels for labels in descriptions.values() if len(labels) > 1] == []


def test_the_error_schema_declares_every_field_the_refusals_carry(schema):
    from approvals.exceptions import OwnProposal, ProposalNotCurrent
    from cases.exceptions import (
        InvalidCaseInput,
        OpenCaseExists,
        TransitionRejected,
        VersionConflict,
    )

    refusals = [
        VersionConflict(expected=1, current=2),
        TransitionRejected("no", allowed=["stop"]),
        InvalidCaseInput("no", fields={"x": ["y"]}),
        OpenCaseExists("no", reference="D-1"),
        OwnProposal("no", roles=["prepared"]),
        ProposalNotCurrent("no", proposal_status="superseded"),
    ]
    declared = set(schema["components"]["schemas"]["Error"]["properties"])
    assert declared == set(ErrorSerializer().fields)
    for refusal in refusals:
        assert {"error", "detail", *refusal.extra} <= declared, type(refusal).__name__
    assert {"retry_after", "reason"} <= declared


def test_order_ids_and_request_keys_carry_the_enforced_pattern(schema):
    intake = schema["components"]["schemas"]["DeliveryDateCaseIntakeRequest"]["properties"]
    for name in ("order_id", "request_key"):
        assert intake[name]["pattern"] == validation.IDENTIFIER_PATTERN
        assert intake[name]["maxLength"] == validation.IDENTIFIER_MAX_LENGTH
    pattern = re.compile(validation.IDENTIFIER_PATTERN.replace("$", r"\Z"))
    for bad in [".", "..", "../x", "a/b", "<script>", "a b", "", "a\n", "x" * 65]:
        assert not pattern.match(bad), bad
        assert validation.identifier_errors(bad), bad
    for good in ["ORD-7731", "a", "A1._:-z", "x" * 64]:
        assert pattern.match(good), good
        assert validation.identifier_errors(good) == [], good


@pytest.mark.parametrize("required", [False, True])
def test_the_text_pattern_refuses_exactly_what_the_server_refuses(required):
    """Every character of the Basic Multilingual Plane, alone and inside text."""
    source = validation.REQUIRED_TEXT_PATTERN if required else validation.TEXT_PATTERN
    pattern = re.compile(source.replace("$", r"\Z"))
    for code in range(0x10000):
        char = chr(code)
        for value in (char, f"a{char}b"):
            refused = bool(validation.text_errors(value, max_length=10)) or (
                required and not value.strip()
            )
            assert refused == (pattern.match(value) is None), (hex(code), value)


def test_every_intake_body_is_closed_as_the_server_refuses_other_fields(schema):
    bodies = {
        name: component
        for name, component in schema["components"]["schemas"].items()
        if name.endswith("CaseIntakeRequest") and component.get("properties")
    }

    # One per kind, and the older body of the delivery date.
    assert len(bodies) == 4
    assert all(component["additionalProperties"] is False for component in bodies.values())
