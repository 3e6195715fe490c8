"""Domain errors raised by case services. Surfaces (admin, API, tasks) translate them."""

from __future__ import annotations


class CaseError(Exception):
    """Base of every refusal a case service can give. ``code`` is machine-readable."""

    code = "case_error"
    http_status = 400

    def __init__(self, detail: str, **extra):
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class CaseNotFound(CaseError):
    """No such case among the ones the actor may see (another team's case looks the same)."""

    code = "not_found"
    http_status = 404


class VersionConflict(CaseError):
    """The caller saw an older version of the case: a conflict, never a silent overwrite."""

    code = "version_conflict"
    http_status = 409

    def __init__(self, *, expected: int, current: int):
        super().__init__(
            f"The case changed since you read it (you had version {expected}, "
            f"it is now version {current}). Reload and decide again.",
            expected_version=expected,
            current_version=current,
        )


class TransitionRejected(CaseError):
    """The transition is not allowed from the current status or its guards do not hold."""

    code = "transition_not_allowed"
    http_status = 409

    def __init__(self, detail: str, *, allowed: list[str]):
        super().__init__(detail, allowed=allowed)
        self.allowed = allowed


class ActionNotPermitted(CaseError):
    """The actor lacks the permission for this action on this case's team."""

    code = "not_permitted"
    http_status = 403


class InvalidCaseInput(CaseError):
    code = "invalid"

    def __init__(self, detail: str, *, fields: dict[str, list[str]]):
        super().__init__(detail, fields=fields)
        self.fields = fields


class OpenCaseExists(CaseError):
    """An order already has an open case for this kind of change: one open case per order and
    kind. ``reference`` names it (a second intake links to it, never opens a twin)."""

    code = "open_case_exists"
    http_status = 409

    def __init__(self, detail: str, *, reference: str):
        super().__init__(detail, reference=reference)
        self.reference = reference
