"""The intake bodies are closed in the schema (a drf-spectacular postprocessing hook): a field
the intake does not take is refused with 400 naming it (``CaseIntakeBaseSerializer``), so the
published schema says ``additionalProperties: false``, as each kind's ``change`` already does."""

from __future__ import annotations

from typing import Any

_INTAKE_SUFFIX = "CaseIntakeRequest"


def close_intake_bodies(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """``additionalProperties: false`` on every intake body with fields of its own."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith(_INTAKE_SUFFIX) and component.get("properties"):
            component["additionalProperties"] = False
    return result
