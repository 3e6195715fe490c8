"""What every answer tells the browser: a Content-Security-Policy that allows scripts from
Holdfast's own origin only, and a Permissions-Policy that refuses every powerful feature.

The pages themselves carry no inline script, so the policy needs no exception for them (the
browser suite, ``tests/browser/test_content_security_policy.py``, checks that no page breaks
under it). The production profile's API speaks JSON only: ``tests/test_serving.py`` asks the
real gunicorn, ``tests/test_production_settings.py`` the settings.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

# A <script> element with a body of its own: no src, and not a JSON data block.
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)


def _directives(response) -> dict[str, list[str]]:
    policy = response["Content-Security-Policy"]
    return {
        name: values
        for name, *values in (part.split() for part in policy.split(";") if part.strip())
    }


@pytest.mark.parametrize(
    "path", ["/admin/login/", "/api/docs/", "/api/schema/", "/healthz", "/metrics"]
)
def test_every_answer_allows_scripts_from_holdfast_alone(db, path):
    response = Client().get(path)

    directives = _directives(response)
    assert directives["script-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"]
    assert directives["base-uri"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]


def test_every_answer_refuses_the_camera_microphone_and_location(db):
    policy = Client().get("/admin/login/")["Permissions-Policy"]

    features = dict(part.strip().split("=", 1) for part in policy.split(","))
    for feature in ("camera", "microphone", "geolocation", "payment", "usb"):
        assert features[feature] == "()"


def test_the_pages_a_person_opens_carry_no_inline_script(admin_client_for_lead, make_case):
    case = make_case()
    client = admin_client_for_lead
    pages = [
        "/admin/",
        f"/admin/cases/case/{case.pk}/change/",
        "/admin/cases/heldcase/",
        "/admin/cases/attentioncase/",
        "/admin/approvals/proposal/?status=awaiting_review",
        "/api/docs/",
    ]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        assert not INLINE_SCRIPT.findall(html), f"{path}: {INLINE_SCRIPT.findall(html)}"


def test_swagger_ui_gets_its_start_script_as_a_file(db):
    page = Client().get("/api/docs/")
    script = re.search(r'<script src="([^"]*\?[^"]*script=[^"]*)"', page.content.decode())
    assert script, page.content.decode()

    start = Client().get(script.group(1).replace("&amp;", "&"))

    assert start.status_code == 200
    assert start["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in start.content


@pytest.fixture
def admin_client_for_lead(lead) -> Client:
    client = Client()
    client.force_login(lead)
    return client
