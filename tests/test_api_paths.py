"""An API path that names no endpoint answers in the API's error shape: ``POST /api/cases``
(no trailing slash) was an HTML 500 with ``DEBUG`` and a 301 to the list (followed as a GET:
the case silently not opened) without; an unknown path was Django's HTML 404 page."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(client, django_user_model):
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user("integration", password="pw")
    client.defaults["HTTP_AUTHORIZATION"] = f"Token {Token.objects.create(user=user).key}"
    return client


@pytest.mark.parametrize("debug", [True, False])
def test_a_post_without_the_trailing_slash_is_a_json_404_naming_the_endpoint(api, settings, debug):
    settings.DEBUG = debug

    response = api.post("/api/cases", {"account": "ACC-1"}, content_type="application/json")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "error": "not_found",
        "detail": "No API endpoint at POST /api/cases. API paths end with a slash: /api/cases/.",
    }


@pytest.mark.parametrize(
    "path", ["/api/nonexistent/", "/api/cases/D-41/foo/", "/api/cases/D-41%00/"]
)
@pytest.mark.parametrize("debug", [True, False])
def test_an_unknown_api_path_is_a_json_404(api, settings, path, debug):
    settings.DEBUG = debug

    response = api.get(path)

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_an_endpoint_and_a_page_outside_the_api_are_untouched(api, client):
    assert api.get("/api/cases/").status_code == 200
    assert api.get("/api/kinds/").status_code == 200
    assert client.get("/admin").status_code == 301  # the admin's own slash redirect
