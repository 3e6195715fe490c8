"""Another team's case is invisible: not listed, not found, never a 403 that leaks existence."""

from __future__ import annotations

import pytest
from django.urls import reverse

from cases.models import CaseEvent
from tests.cases.helpers import last_event_id, reload

SECRET = b"ORD-SECRET-9000"


@pytest.fixture
def own_case(make_case):
    return make_case(order_id="ORD-OWN-41")


@pytest.fixture
def as_lead(client, lead):
    client.force_login(lead)
    return client


def _assert_untouched(other_case, version, last_id):
    assert reload(other_case).version == version
    assert last_event_id(other_case) == last_id


def test_admin_list_shows_only_own_teams_cases(as_lead, own_case, other_case):
    response = as_lead.get(reverse("admin:cases_case_changelist"))

    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == [own_case]
    assert b"ORD-OWN-41" in response.content
    assert SECRET not in response.content


def test_admin_search_does_not_find_another_teams_case(as_lead, own_case, other_case):
    for query in ("ORD-SECRET-9000", other_case.reference, "ACC-200"):
        response = as_lead.get(reverse("admin:cases_case_changelist"), {"q": query})
        assert list(response.context["cl"].result_list) == [], query


def test_admin_team_filter_offers_only_own_teams(as_lead, team, other_case):
    response = as_lead.get(reverse("admin:cases_case_changelist"))

    team_filter = next(f for f in response.context["cl"].filter_specs if f.title == "team")
    assert [label for _, label in team_filter.lookup_choices] == [team.name]


def test_admin_change_page_of_another_teams_case_redirects_as_missing(as_lead, other_case):
    url = reverse("admin:cases_case_change", args=[other_case.pk])

    response = as_lead.get(url)

    assert response.status_code == 302
    assert response.url == reverse("admin:index")
    followed = as_lead.get(url, follow=True)
    messages = [str(m) for m in followed.context["messages"]]
    assert any("doesn’t exist" in m for m in messages), messages
    assert SECRET not in followed.content
    assert other_case.reference.encode() not in followed.content


def test_admin_change_post_for_another_teams_case_changes_nothing(as_lead, lead, other_case):
    version, last_id = other_case.version, last_event_id(other_case)
    url = reverse("admin:cases_case_change", args=[other_case.pk])

    response = as_lead.post(
        url, {"owner": lead.pk, "expected_version": version, "change_reason": "grab it"}
    )

    assert response.status_code == 302
    assert response.url == reverse("admin:index")
    _assert_untouched(other_case, version, last_id)
    assert reload(other_case).owner.username == "outsider"


def test_admin_history_of_another_teams_case_redirects_as_missing(as_lead, other_case):
    response = as_lead.get(reverse("admin:cases_case_history", args=[other_case.pk]), follow=True)

    assert response.redirect_chain == [(reverse("admin:index"), 302)]
    assert SECRET not in response.content


def test_admin_transition_url_of_another_teams_case_is_not_found(as_lead, other_case):
    version, last_id = other_case.version, last_event_id(other_case)
    url = reverse("admin:cases_case_transition", args=[other_case.pk, "stop"])

    assert as_lead.get(url).status_code == 404
    response = as_lead.post(url, {"expected_version": version, "reason": "stop theirs"})

    assert response.status_code == 404
    _assert_untouched(other_case, version, last_id)


def test_admin_evidence_url_of_another_teams_case_is_not_found(as_lead, other_case):
    version, last_id = other_case.version, last_event_id(other_case)
    url = reverse("admin:cases_case_evidence", args=[other_case.pk])

    response = as_lead.post(
        url,
        {
            "expected_version": version,
            "source_system": "email",
            "external_reference": "m-1",
            "kind": "customer_request",
            "permitted_basis": "contract",
            "summary": "planted",
        },
    )

    assert response.status_code == 404
    assert not other_case.evidence.exists()
    _assert_untouched(other_case, version, last_id)


def test_admin_event_list_hides_another_teams_events(as_lead, own_case, other_case):
    response = as_lead.get(reverse("admin:cases_caseevent_changelist"))

    listed = {event.case_id for event in response.context["cl"].result_list}
    assert listed == {own_case.pk}
    theirs = CaseEvent.objects.filter(case=other_case).first()
    page = as_lead.get(reverse("admin:cases_caseevent_change", args=[theirs.pk]))
    assert page.status_code == 302
    assert page.url == reverse("admin:index")


def test_superuser_sees_every_teams_case_in_admin(client, django_user_model, own_case, other_case):
    client.force_login(django_user_model.objects.create_superuser("root", "r@x.example", "pw"))

    response = client.get(reverse("admin:cases_case_changelist"))

    assert set(response.context["cl"].result_list) == {own_case, other_case}


# --- the API ---------------------------------------------------------------------------------


def test_api_list_excludes_another_teams_case(api, lead, own_case, other_case):
    response = api(lead).get("/api/cases/")

    assert response.status_code == 200
    assert [c["reference"] for c in response.json()["results"]] == [own_case.reference]
    assert response.json()["count"] == 1


def test_api_detail_of_another_teams_case_is_404_not_403(api, lead, other_case):
    response = api(lead).get(f"/api/cases/{other_case.reference}/")

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert SECRET not in response.content


def test_api_detail_of_another_teams_case_looks_like_a_missing_one(api, lead, other_case):
    theirs = api(lead).get(f"/api/cases/{other_case.reference}/")
    missing = api(lead).get("/api/cases/D-9999/")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"] == missing.json()["error"]


@pytest.mark.parametrize("action", ["transitions", "cancel"])
def test_api_writes_to_another_teams_case_are_404(api, lead, other_case, action):
    version, last_id = other_case.version, last_event_id(other_case)

    response = api(lead).post(
        f"/api/cases/{other_case.reference}/{action}/",
        {"transition": "stop", "expected_version": version, "reason": "stop theirs"},
        format="json",
    )

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    _assert_untouched(other_case, version, last_id)
    assert not other_case.cancellations.exists()
