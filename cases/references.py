"""Case references per team: each team has its own prefix and counter (D-41, R-7), so one
team's numbers say nothing of another's volume.

The one writer of a case's number and reference (``case_number_next``, called by
``cases.services.case_open``), of a team's prefix when none was given (``free_case_prefix``),
and of the case's part of an operation key (``operation_key_part``).

Before references were per team, every case of the deployment took its number from one counter
and the prefix ``settings.CASE_REFERENCE_PREFIX``: those references stay as they are. The team
that kept that prefix (the demo's Deliveries keeps ``D``) counts on past every number that
prefix ever had, and its operation keys keep their old shape (``DATE-41-1``); every other team's
keys name its prefix (``DATE-R7-1``), so keys stay unique across teams.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max

from cases.models import Case, CounterRow, Team
from cases.prefixes import CASE_PREFIX_MAX_LENGTH, free_case_prefix

__all__ = ["CASE_PREFIX_MAX_LENGTH", "free_case_prefix"]

CASE_PREFIX_PATTERN = rf"^[A-Za-z]{{1,{CASE_PREFIX_MAX_LENGTH}}}$"
_CASE_PREFIX = re.compile(CASE_PREFIX_PATTERN.replace("$", r"\Z"))


def counter_name(team_id: int) -> str:
    return f"case_number:team:{team_id}"


def case_prefix_errors(prefix: str, *, team_id: int | None = None) -> list[str]:
    """A team's case prefix: 1 to 8 letters, used by no other team."""
    if not _CASE_PREFIX.match(prefix or ""):
        return [f"1 to {CASE_PREFIX_MAX_LENGTH} letters A-Z, e.g. D for Deliveries."]
    others = Team.objects.filter(case_prefix__iexact=prefix)
    if team_id is not None:
        others = others.exclude(pk=team_id)
    if others.exists():
        return [f"Another team uses the prefix {prefix}."]
    return []


def highest_number(team: Team) -> int:
    """The highest number the team's counter must stay above: its own cases', and every case
    whose reference carries its prefix (before per-team numbering, every team's)."""
    own = Case.objects.filter(team=team).aggregate(n=Max("number"))["n"] or 0
    prefixed = (
        Case.objects.filter(reference__startswith=f"{team.case_prefix}-").aggregate(
            n=Max("number")
        )["n"]
        or 0
    )
    return max(own, prefixed)


def case_number_next(team: Team) -> tuple[int, str]:
    """The next number of ``team`` and the reference it makes. Inside the caller's transaction
    the counter row stays locked until it commits, so two intakes on one team at once get
    distinct numbers (the second waits); other teams' intakes do not wait."""
    name = counter_name(team.pk)
    with transaction.atomic():
        if not CounterRow.objects.filter(name=name).exists():
            # A team without a counter yet (new, or made before this release's migration).
            CounterRow.objects.get_or_create(name=name, defaults={"value": highest_number(team)})
        CounterRow.objects.filter(name=name).update(value=F("value") + 1)
        number = CounterRow.objects.values_list("value", flat=True).get(name=name)
    return number, f"{team.case_prefix}-{number}"


def counter_raise_past(team: Team, minimum: int) -> None:
    """Make the team's next number greater than ``minimum`` (never lowers it)."""
    name = counter_name(team.pk)
    with transaction.atomic():
        CounterRow.objects.get_or_create(name=name, defaults={"value": highest_number(team)})
        CounterRow.objects.filter(name=name, value__lt=minimum).update(value=minimum)


def operation_key_part(case: Case) -> str:
    """The case's part of its operation keys: its number for a reference with the
    deployment's original prefix (the keys it always had), else prefix and number."""
    prefix = case.reference.rsplit("-", 1)[0]
    if prefix == settings.CASE_REFERENCE_PREFIX:
        return str(case.number)
    return f"{prefix}{case.number}"
