"""Input bounds, in one place: the admin forms, the API serializers and the services use these.

Each check returns a list of messages (empty when the value is acceptable), so a service can
collect them per field and refuse with ``InvalidCaseInput`` before it writes anything; the
``validate_*`` wrappers raise Django's ``ValidationError`` for form fields and serializer
fields (DRF turns it into a field error).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxLengthValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)

from cases.exceptions import InvalidCaseInput

# Lengths of the free-text and key fields (the keys match their model columns).
ACCOUNT_REFERENCE_MAX_LENGTH = 40
REQUEST_KEY_MAX_LENGTH = 100
ORDER_ID_MAX_LENGTH = 60
USERNAME_MAX_LENGTH = 150
NOTE_MAX_LENGTH = 4000
REASON_MAX_LENGTH = 2000
SHORT_REASON_MAX_LENGTH = 300
NAME_MAX_LENGTH = 200
# The largest value the version columns hold on every supported database.
MAX_ORDER_VERSION = 2_147_483_647

# Control, format (zero-width, bidi), private-use, surrogate and line/paragraph separators,
# and unassigned code points: none belongs in an identifier someone reads or compares.
_KEY_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
# Explicit bidi embedding, override and isolate controls (all Cf): they reorder what a reader
# sees, so free text refuses them too.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f"  # Arabic letter mark, left-to-right and right-to-left marks
    "\u202a\u202b\u202c\u202d\u202e"  # embeddings, pop, overrides
    "\u2066\u2067\u2068\u2069"  # isolates
)
# Free text may hold line breaks and tabs; no other control character (PostgreSQL cannot store
# NUL at all) and no lone surrogate.
_TEXT_ALLOWED_CONTROLS = frozenset("\t\n\r")


# The same rules as a pattern, for the API schema (``text_errors`` gives the messages): no
# control character but tab and line breaks, no lone surrogate, no bidi control.
_TEXT_FORBIDDEN = (
    r"\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f"
    r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
)
# What ``str.strip`` removes (the API trims text before it checks blankness).
_WHITESPACE = (
    r"\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)
TEXT_PATTERN = rf"^[^{_TEXT_FORBIDDEN}]*$"
# Required text: at least one character that is not white space.
REQUIRED_TEXT_PATTERN = (
    rf"^[^{_TEXT_FORBIDDEN}]*[^{_TEXT_FORBIDDEN}{_WHITESPACE}][^{_TEXT_FORBIDDEN}]*$"
)


def _describe(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


# Order ids and request keys travel into URLs, file names and the order system's paths: a safe
# identifier only. It starts with a letter or digit, so it is never "." or "..", and it holds no
# "/", no space and no control character. The API schema publishes this very pattern.
IDENTIFIER_MAX_LENGTH = 64
IDENTIFIER_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._:-]{{0,{IDENTIFIER_MAX_LENGTH - 1}}}$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN.replace("$", r"\Z"))
IDENTIFIER_RULE = (
    f"1 to {IDENTIFIER_MAX_LENGTH} characters: letters A-Z a-z, digits, '.', '_', ':' or '-', "
    "starting with a letter or a digit"
)


def identifier_errors(value: str) -> list[str]:
    """An order id or a request key: ``IDENTIFIER_PATTERN``, with a message saying why not."""
    if not isinstance(value, str):
        return ["Must be text."]
    if not value:
        return ["Must not be blank."]
    if _IDENTIFIER.match(value):
        return []
    if len(value) > IDENTIFIER_MAX_LENGTH:
        return [f"At most {IDENTIFIER_MAX_LENGTH} characters."]
    return unprintable_errors(value) or [f"Not a valid identifier: use {IDENTIFIER_RULE}."]


def unprintable_errors(value: str) -> list[str]:
    """A key's character that has no place in it (:func:`first_unprintable`), as a message."""
    if (char := first_unprintable(value)) is not None:
        return [f"Only printable characters: {_describe(char)} is not allowed."]
    return []


def first_unprintable(value: str) -> str | None:
    """The first character of ``value`` that has no place in a key, or None."""
    for char in value:
        category = unicodedata.category(char)
        if (
            category in _KEY_FORBIDDEN_CATEGORIES
            or char in BIDI_CONTROLS
            or (category == "Zs" and char != " ")
        ):
            return char
    return None


def key_errors(value: str, *, max_length: int) -> list[str]:
    """A key (request key, order id, account reference, username): printable characters only,
    no whitespace but the plain space, not blank, at most ``max_length`` characters."""
    if not isinstance(value, str):
        return ["Must be text."]
    if not value.strip():
        return ["Must not be blank."]
    if len(value) > max_length:
        return [f"At most {max_length} characters."]
    if (char := first_unprintable(value)) is not None:
        return [f"Only printable characters: {_describe(char)} is not allowed."]
    return []


def text_errors(value: str, *, max_length: int, required: bool = False) -> list[str]:
    """Free text (a note, a reason): at most ``max_length`` characters, no control characters
    but tab and line breaks, no bidi controls."""
    if not isinstance(value, str):
        return ["Must be text."]
    if required and not value.strip():
        return ["Required."]
    if len(value) > max_length:
        return [f"At most {max_length} characters (this has {len(value)})."]
    for char in value:
        category = unicodedata.category(char)
        if (category == "Cc" and char not in _TEXT_ALLOWED_CONTROLS) or category == "Cs":
            return [f"{_describe(char)} is not allowed in text."]
        if char in BIDI_CONTROLS:
            return [f"{_describe(char)} (a bidirectional control) is not allowed in text."]
    return []


def order_version_errors(value: int | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int):
        return ["Must be a whole number."]
    if not 1 <= value <= MAX_ORDER_VERSION:
        return [f"Between 1 and {MAX_ORDER_VERSION}."]
    return []


def ensure_valid(**fields: list[str]) -> None:
    """Refuse with one ``InvalidCaseInput`` naming every field that has messages."""
    errors = {name: messages for name, messages in fields.items() if messages}
    if errors:
        raise InvalidCaseInput(
            "The request has invalid fields; nothing was written.", fields=errors
        )


# --- validators for form and serializer fields -----------------------------------------------


class KeyValidator:
    """``key_errors`` as a field validator."""

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length

    def __call__(self, value: str) -> None:
        if messages := key_errors(value, max_length=self.max_length):
            raise ValidationError(messages)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyValidator) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash((KeyValidator, self.max_length))


class IdentifierValidator(RegexValidator):
    """``identifier_errors`` as a field validator; a ``RegexValidator`` so the schema states
    its pattern."""

    def __init__(self) -> None:
        super().__init__(IDENTIFIER_PATTERN)

    def __call__(self, value: str) -> None:
        if messages := identifier_errors(value):
            raise ValidationError(messages)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdentifierValidator)

    def __hash__(self) -> int:
        return hash(IdentifierValidator)


class TextValidator(RegexValidator):
    """``text_errors`` as a field validator (the field's own ``required`` decides blankness);
    a ``RegexValidator`` so the schema states the same rule as a pattern."""

    def __init__(self, max_length: int, *, required: bool = False) -> None:
        super().__init__(REQUIRED_TEXT_PATTERN if required else TEXT_PATTERN)
        self.max_length = max_length
        self.required = required

    def __call__(self, value: str) -> None:
        if messages := text_errors(value, max_length=self.max_length):
            raise ValidationError(messages)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TextValidator)
            and other.max_length == self.max_length
            and other.required == self.required
        )

    def __hash__(self) -> int:
        return hash((TextValidator, self.max_length, self.required))


# The validators above that state a length bound in their own words (``key_errors``,
# ``identifier_errors``, ``text_errors``): a field holding one needs no other length message.
LENGTH_BOUNDING_VALIDATORS = (KeyValidator, IdentifierValidator, TextValidator)


class StatedMaxLength(MaxLengthValidator):
    """A length bound stated, not checked: the API schema reads it as ``maxLength`` (and a
    form's widget as ``maxlength``); the field's own validator checks it, in its words."""

    def __call__(self, value: Any) -> None:
        return None


def one_length_message(validators: list[Any]) -> list[Any]:
    """A field's ``validators`` with Django's (or DRF's) length check stated only, when one of
    :data:`LENGTH_BOUNDING_VALIDATORS` checks the length: a long value gets one message
    ("At most 4000 characters (this has 5000).") instead of two. Those refuse every control
    character too, so DRF's own refusal of NUL goes: a NUL gets one message as well ("U+0000
    NULL is not allowed in text.", not that and "Null characters are not allowed.")."""
    if not any(isinstance(v, LENGTH_BOUNDING_VALIDATORS) for v in validators):
        return validators
    return [
        StatedMaxLength(v.limit_value) if type(v) is MaxLengthValidator else v
        for v in validators
        if not isinstance(v, ProhibitNullCharactersValidator)
    ]


def parse_id(value: str | None) -> int | None:
    """A primary key from a query string: digits only and within a 64-bit column, else None."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 18:
        return None
    return int(value)


def not_the_accounts_order(order_id: str, account_reference: str) -> str:
    """Why an order cannot be the account's, in the same words whether the order system has no
    such order or has it for another account: an answer that told the two apart would tell
    anyone who may open a case whether an order id exists."""
    return f"The order system has no order {order_id} of account {account_reference}"


def cut_at_word(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else cut after its last whole word that
    fits, with "…" (a subject or a notification cut mid-word read as a typo)."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1].rsplit(' ', 1)[0].rstrip(' ,;:(')}…"
