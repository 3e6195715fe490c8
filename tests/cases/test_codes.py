"""Audit action codes come from one registry, ``cases.codes.Action``, and keep their stored
values."""

from __future__ import annotations

import pytest
from django.db import transaction

from cases.codes import Action
from cases.kernel import lock_case, record_event, record_fact
from cases.models import CaseEvent


def test_members_are_the_stored_strings():
    assert Action.REVOCATION_REQUESTED == "cases.revocation.requested"
    assert Action("cases.case.created") is Action.CASE_CREATED
    assert len({a.value for a in Action}) == len(Action)  # no two names for one code


def test_every_code_is_namespaced_by_an_app():
    for action in Action:
        app, *rest = action.value.split(".")
        assert app in {"cases", "approvals", "reconciliation"}, action
        assert len(rest) >= 1, action
        assert all(rest), action


@pytest.mark.parametrize("write", [record_event, record_fact])
def test_an_unregistered_code_is_refused_before_anything_is_written(case, lead, write):
    before = CaseEvent.objects.filter(case=case).count()

    with pytest.raises(ValueError, match="cases.widget.frobbed"), transaction.atomic():
        write(case=lock_case(case.pk), action="cases.widget.frobbed", actor=lead)

    assert CaseEvent.objects.filter(case=case).count() == before


def test_a_registered_code_is_stored_as_its_plain_string(case, lead):
    with transaction.atomic():
        event = record_fact(case=lock_case(case.pk), action=Action.EVIDENCE_RECORDED, actor=lead)

    assert type(event.action) is str  # what the hash was computed over, as read back
    event.refresh_from_db()
    assert event.action == "cases.evidence.recorded"
