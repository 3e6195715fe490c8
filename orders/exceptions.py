"""The one error the order system answers with: a refusal with a contract code."""

from __future__ import annotations


class Refused(Exception):
    """A refusal: nothing was changed. ``code`` is the contract's machine-readable error."""

    def __init__(
        self, status: int, code: str, detail: str, *, fields: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.fields = fields

    def as_json(self) -> dict:
        body: dict = {"error": self.code, "detail": self.detail}
        if self.fields:
            body["fields"] = self.fields
        return body


def invalid(fields: dict[str, str]) -> Refused:
    return Refused(422, "invalid_field", "Some fields are invalid.", fields=fields)
