"""A team's case prefix made from its name (``cases.models.Team.save`` when none is given;
``cases.references`` is the rest of the rule). No imports of the models: they import this."""

from __future__ import annotations

import string
from collections.abc import Iterable

CASE_PREFIX_MAX_LENGTH = 8


def free_case_prefix(name: str, taken: Iterable[str]) -> str:
    """A prefix for a team called ``name`` that no team in ``taken`` has: its initial, then
    more of its letters, then its initial and a letter."""
    taken = {prefix.upper() for prefix in taken}
    letters = "".join(c for c in name.upper() if c in string.ascii_uppercase) or "T"
    candidates = [letters[:n] for n in range(1, min(len(letters), CASE_PREFIX_MAX_LENGTH) + 1)]
    candidates += [letters[0] + c for c in string.ascii_uppercase]
    candidates += [
        letters[0] + a + b for a in string.ascii_uppercase for b in string.ascii_uppercase
    ]
    return next(c for c in candidates if c not in taken)
