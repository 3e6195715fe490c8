"""Bulk reassignment: many cases handed to an owner and/or a backup at once, with one reason.

Each case is reassigned by the one writer of the rule, ``services.case_assign`` (its lock,
its permission check, its team-membership check, one ``case.reassigned`` event per case in
its timeline). The whole batch is one transaction: a refusal for any case (outside the
actor's teams, a person not in that case's team, a case changed meanwhile) leaves every case
as it was and names the case refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from cases import selectors, services, validation
from cases.exceptions import ActionNotPermitted, CaseError, InvalidCaseInput
from cases.models import Case

MAX_CASES = 200  # one batch, one transaction: a bigger one is split by the person


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


KEEP = _Keep()  # leave the field as each case has it


def cases_bulk_reassign(
    *,
    actor,
    case_ids: Iterable[int],
    reason: str,
    owner=None,
    backup=KEEP,
    expected_versions: dict[int, int] | None = None,
) -> list[Case]:
    """Hand each case to ``owner`` (``None``: keep each case's owner) and ``backup`` (``KEEP``:
    keep each case's; ``None``: no backup). ``expected_versions``: the version of each case
    the actor saw, when known. Returns the reassigned cases."""
    ids = sorted(set(case_ids))
    reason = (reason or "").strip()
    validation.ensure_valid(
        reason=validation.text_errors(
            reason, max_length=validation.REASON_MAX_LENGTH, required=True
        ),
        cases=["Choose at least one case."]
        if not ids
        else ([f"At most {MAX_CASES} cases at once."] if len(ids) > MAX_CASES else []),
        owner=["Choose a new owner or a new backup."]
        if owner is None and isinstance(backup, _Keep)
        else [],
    )
    with transaction.atomic():
        visible = {case.pk: case for case in selectors.cases_for(actor).filter(pk__in=ids)}
        outside = [pk for pk in ids if pk not in visible]
        if outside:
            raise ActionNotPermitted(
                f"{actor} may not reassign {len(outside)} of these cases: "
                "they are not in your teams."
            )
        done: list[Case] = []
        for pk in ids:
            case = visible[pk]
            seen = (expected_versions or {}).get(pk, case.version)
            try:
                done.append(
                    services.case_assign(
                        case=case,
                        expected_version=seen,
                        owner=owner if owner is not None else case.owner,
                        backup=case.backup if isinstance(backup, _Keep) else backup,
                        reason=reason,
                        actor=actor,
                    )
                )
            except CaseError as exc:
                raise _naming(exc, case) from exc
    return done


def _naming(exc: CaseError, case: Case) -> CaseError:
    """The refusal, of the same kind, naming the case and saying that none was reassigned."""
    problems = exc.detail
    if isinstance(exc, InvalidCaseInput):
        problems = " ".join(m for messages in exc.fields.values() for m in messages)
    refused = type(exc).__new__(type(exc))
    refused.__dict__.update(exc.__dict__)
    refused.detail = f"{case.reference}: {problems} No case was reassigned."
    Exception.__init__(refused, refused.detail)
    return refused
