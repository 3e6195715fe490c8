"""The request bodies are closed in the schema (a drf-spectacular postprocessing hook): a field
a body does not take is refused with 400 naming it (``cases.serializers.ClosedBodySerializer``:
the intake, transitions, cancel, prepare, approve and reject), so the published schema says
``additionalProperties: false``, as each kind's ``change`` already does."""

from __future__ import annotations

from typing import Any

_INTAKE_SUFFIX = "CaseIntakeRequest"


def _closed_bases() -> set[str]:
    """The component names (without drf-spectacular's ``Request`` suffix) of every closed
    body's serializer."""
    from cases.serializers import ClosedBodySerializer

    found, pending = set(), [ClosedBodySerializer]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            found.add(sub.__name__.removesuffix("Serializer"))
            pending.append(sub)
    return found


def close_intake_bodies(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """``additionalProperties: false`` on every closed request body with fields of its own."""
    closed = _closed_bases()
    for name, component in result.get("components", {}).get("schemas", {}).items():
        base = name.removesuffix("Request")
        if (name.endswith(_INTAKE_SUFFIX) or base in closed) and component.get("properties"):
            component["additionalProperties"] = False
    return result
