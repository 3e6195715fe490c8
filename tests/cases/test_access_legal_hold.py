"""Review: the admin legal-hold button toggles whatever the state is now.

The page renders "Place a legal hold" or "Lift the legal hold" and posts ``expected_version``,
but ``action_view`` calls ``case_set_legal_hold(hold=not case.legal_hold)`` and never checks the
version: the admin decides the business outcome from current state, not from what the person
saw and asked for.
"""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from cases.services import case_set_legal_hold


def test_stale_place_legal_hold_button_does_not_lift_a_hold_just_placed(case, lead, backup):
    """The page offered "Place a legal hold" at version v; meanwhile the backup placed it.
    The button toggles the current state and ignores ``expected_version``, so the stale click
    lifts the hold (which is what blocks purging)."""
    client = Client(raise_request_exception=False)
    client.force_login(lead)
    seen_version = case.version
    case_set_legal_hold(case=case, actor=backup, hold=True, reason="Litigation notice")

    client.post(
        reverse("admin:cases_case_action", args=[case.pk, "place_legal_hold"]),
        {"expected_version": seen_version},
    )

    case.refresh_from_db()
    assert case.legal_hold is True
