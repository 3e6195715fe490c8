"""The API's JSON parser: DRF's, with a bound on how deeply a body may nest, and its errors
in words.

Python's ``json`` recurses once per level, so a body of a hundred thousand ``[`` raises
``RecursionError`` (a 500) inside DRF's parser. The depth is measured first, in one pass that
skips string contents, and a body nested deeper than ``max_depth`` is a ``ParseError`` (400).
"""

from __future__ import annotations

import json
import re
import sys

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json as drf_json

# A JSON string (escapes included) or one bracket; everything else is irrelevant to depth.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPENERS = frozenset({"[", "{"})
_CLOSERS = frozenset({"]", "}"})


def json_depth_exceeds(text: str, max_depth: int) -> bool:
    depth = 0
    for match in _TOKENS.finditer(text):
        lexeme = match.group()
        if lexeme in _OPENERS:
            depth += 1
            if depth > max_depth:
                return True
        elif lexeme in _CLOSERS:
            depth -= 1
    return False


# The longest integer Python reads from text (``sys.get_int_max_str_digits``, 4300 by default).
_MAX_DIGITS = sys.get_int_max_str_digits() or 4300


# A JSON string (skipped whole) or a run of more digits than that.
_LONG_NUMBER = re.compile(rf'"(?:[^"\\]|\\.)*"|[0-9]{{{_MAX_DIGITS + 1},}}', re.DOTALL)


def json_number_too_long(text: str) -> bool:
    """Whether a number outside the strings of ``text`` has more than ``_MAX_DIGITS`` digits."""
    return any(not match.group().startswith('"') for match in _LONG_NUMBER.finditer(text))


class BoundedJSONParser(JSONParser):
    max_depth = 32

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise ParseError(f"JSON parse error - the body is not valid {encoding}.") from None
        if json_depth_exceeds(text, self.max_depth):
            raise ParseError(f"JSON parse error - nested deeper than {self.max_depth} levels.")
        if json_number_too_long(text):
            # Python refuses to read such an integer, in words about its own settings.
            raise ParseError(f"JSON parse error - a number has more than {_MAX_DIGITS} digits.")
        parse_constant = drf_json.strict_constant if self.strict else None
        try:
            return json.loads(text, parse_constant=parse_constant)
        except json.JSONDecodeError as exc:
            # Python's words ("Expecting value: line 1 column 36 (char 35)"), said plainly.
            what = _DECODE_WORDS.get(exc.msg, exc.msg[:1].lower() + exc.msg[1:])
            raise ParseError(
                f"JSON parse error - {what} at line {exc.lineno}, column {exc.colno}."
            ) from None
        except ValueError:  # NaN and Infinity, which JSON does not have
            raise ParseError("JSON parse error - NaN and Infinity are not JSON numbers.") from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None


# Python's ``json`` messages, in words for the API's callers.
_DECODE_WORDS = {
    "Expecting value": "a value was expected",
    "Expecting ',' delimiter": "a comma was expected",
    "Expecting ':' delimiter": "a colon was expected",
    "Expecting property name enclosed in double quotes": "a field name in double quotes was "
    "expected",
    "Unterminated string starting at": "a string is not closed",
    "Extra data": "more follows the end of the JSON value",
    "Invalid control character at": "a string holds a control character (escape it)",
    "Invalid \\escape": "a string holds an invalid escape",
    "Illegal trailing comma before end of object": "a comma ends an object",
    "Illegal trailing comma before end of array": "a comma ends a list",
}
