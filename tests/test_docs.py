"""The docs stay true to the code: the state picture is the state machine's, every status is
on it, and every role's guide shows that role's screens from the browser suite.

``make docs`` (in CI) builds the site strictly: a broken link or a missing image fails it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cases.models import Status
from config.statedoc import render_dot, render_markdown

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ROLES = ["agent", "approver", "lead", "operator", "integrator", "order-system"]


def test_the_state_page_is_generated_from_the_state_machine():
    committed = (DOCS / "states.md").read_text()
    assert committed == render_markdown(), "the state machine changed: run make docs-states"


def test_the_state_page_and_picture_name_every_status():
    page = (DOCS / "states.md").read_text()
    picture = (DOCS / "states.svg").read_text()
    for status in Status:
        assert f"## From `{status.value}`" in page
        assert f"<title>{status.value}</title>" in picture, f"{status.value} is not drawn"
        assert f"{status.value} [" in render_dot()


@pytest.mark.parametrize("role", ROLES)
def test_each_role_guide_shows_its_own_screens(role):
    guide = (DOCS / "roles" / f"{role}.md").read_text()
    shots = re.findall(r"!\[[^\]]+\]\(\.\./screenshots/([^)]+\.png)\)", guide)
    assert shots, f"docs/roles/{role}.md shows no screenshot"
    for name in shots:
        assert (DOCS / "screenshots" / name).is_file(), f"{name}: run make docs-screenshots"
    prefix = "lead" if role == "lead" else role.replace("order-system", "order-system-team")
    assert any(name.startswith(prefix) for name in shots), shots


def test_the_readme_links_to_the_docs():
    readme = (DOCS.parent / "README.md").read_text()
    assert "make docs" in readme
    assert "docs/index.md" in readme


def test_every_webhook_signature_the_docs_show_is_the_form_the_receiver_checks():
    """The integrator's guide once showed `sha256=<hex>` alone: following it got 401."""
    shown = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = " ".join(path.read_text().split())
        shown += [(path.name, m) for m in re.findall(r"X-Orders-Signature: ([^`]*)`", text)]

    assert shown, "no document shows the webhook signature"
    for name, form in shown:
        assert form.startswith("t=<seconds>,sha256=<hex HMAC-SHA256("), (name, form)
