"""Review: the customer account admin is a raw model form for leads.

A lead can move an account of their team into any other team (every team is offered), with no
service call and no audit event: the account, and every case opened for it from then on, land in
a team that never accepted them.
"""

from __future__ import annotations

from django.urls import reverse

from cases.models import CustomerAccount


def _change_url(account):
    return reverse("admin:cases_customeraccount_change", args=[account.pk])


def test_account_page_does_not_offer_another_team(client, lead, account, other_team):
    client.force_login(lead)

    page = client.get(_change_url(account))

    assert page.status_code == 200
    assert other_team.name not in page.text


def test_lead_cannot_move_an_account_into_another_team(client, lead, account, other_team, team):
    client.force_login(lead)

    client.post(
        _change_url(account),
        {
            "reference": account.reference,
            "name": account.name,
            "email": account.email,
            "team": other_team.pk,
            "verified": "on",
        },
    )

    assert CustomerAccount.objects.get(pk=account.pk).team == team
