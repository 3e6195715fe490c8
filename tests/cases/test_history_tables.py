"""The read-only inlines (``cases.admin.inlines.ReadOnlyInline``: a case's audit trail,
attempts, operations, proposals and evidence; a proposal's approvals; an account's history)
show what Django's tabular inline shows, cell for cell, without a form a row: the formset holds
no form, the rows are read by ``history_rows`` (``admin/edit_inline/history_table.html``)."""

from __future__ import annotations

import re

import pytest
from django.forms.models import BaseInlineFormSet
from django.test.html import parse_html
from django.urls import reverse

from approvals.models import Proposal
from cases.admin.inlines import ReadOnlyInline, RowsOfThePage

pytestmark = pytest.mark.order_system

GROUP = re.compile(r'<div class="js-inline-admin-formset inline-group" id="([\w-]+)-group"')
HIDDEN = re.compile(r'<input type="hidden"[^>]*>')


@pytest.fixture
def done_case(approved_case):
    """A case taken through the live order system to done: each inline has rows."""
    from reconciliation.apply import apply_case

    case = approved_case()
    assert apply_case(case_id=case.pk) == "done"
    case.refresh_from_db()
    return case


def _pages(case) -> list[str]:
    proposal = Proposal.objects.filter(case=case).latest("pk")
    return [
        reverse("admin:cases_case_change", args=[case.pk]),
        reverse("admin:approvals_proposal_change", args=[proposal.pk]),
        reverse("admin:cases_customeraccount_change", args=[case.account_id]),
    ]


def _tables(html: str) -> dict[str, tuple[str, int]]:
    """Each inline group's table (its head and rows, the rows' hidden inputs left out) and how
    many rows it has, by the formset's prefix."""
    tables = {}
    for match in GROUP.finditer(html):
        prefix = match.group(1)
        start = html.index("<table>", match.end())
        end = html.index("</table>", start) + len("</table>")
        table = HIDDEN.sub("", html[start:end])
        tables[prefix] = (table, table.count('<tr class="form-row'))
    return tables


def _as_django_renders_it(monkeypatch) -> None:
    """Django's own tabular inline, a form a row, for the same inlines."""
    monkeypatch.setattr(ReadOnlyInline, "template", "admin/edit_inline/tabular.html")
    monkeypatch.setattr(RowsOfThePage, "initial_form_count", BaseInlineFormSet.initial_form_count)
    monkeypatch.setattr(RowsOfThePage, "total_form_count", BaseInlineFormSet.total_form_count)


def test_every_history_table_shows_what_djangos_tabular_inline_shows(
    client, lead, done_case, monkeypatch
):
    client.force_login(lead)
    served = {url: _tables(client.get(url).content.decode()) for url in _pages(done_case)}
    _as_django_renders_it(monkeypatch)
    native = {url: _tables(client.get(url).content.decode()) for url in _pages(done_case)}

    case_page, proposal_page, _ = _pages(done_case)
    rows = {url: {prefix: n for prefix, (_, n) in tables.items()} for url, tables in served.items()}
    # Not a comparison of empty tables: the case's history and its proposal's approval are there.
    for prefix in ("events", "operations", "proposals", "evidence"):
        assert rows[case_page].get(prefix), (prefix, rows)
    assert any(rows[proposal_page].values()), rows
    assert sum(sum(by.values()) for by in rows.values()) >= 10, rows
    for url in served:
        assert served[url].keys() == native[url].keys(), url
        for prefix, (table, n) in served[url].items():
            assert n == native[url][prefix][1], (url, prefix)
            assert parse_html(table) == parse_html(native[url][prefix][0]), (url, prefix)
    # The proposals' rows link to each proposal's page, as Django's "View" link does.
    proposals = served[case_page]["proposals"][0]
    assert 'class="inlineviewlink">View</a>' in proposals


def test_a_history_table_builds_no_form_and_no_hidden_input_a_row(client, lead, done_case):
    client.force_login(lead)
    response = client.get(reverse("admin:cases_case_change", args=[done_case.pk]))
    body = response.content.decode()

    page = parse_html(body)
    formsets = response.context["inline_admin_formsets"]
    assert formsets
    for admin_formset in formsets:
        assert admin_formset.formset.forms == []
        prefix = admin_formset.formset.prefix
        assert f'name="{prefix}-0-id"' not in body
        # The management form the template writes out is the one Django renders.
        managed = HIDDEN.findall(str(admin_formset.formset.management_form))
        assert len(managed) == 4, managed
        for hidden in managed:
            assert page.count(parse_html(hidden)) == 1, hidden
        assert f'name="{prefix}-TOTAL_FORMS" value="0"' in body, prefix
    assert body.count('<tr class="form-row has_original"') >= 10


def test_the_case_form_saves_with_the_management_forms_the_page_served(
    client, lead, backup, done_case
):
    """What a browser posts back: every hidden input the page served (the history tables'
    management forms among them) with the form's fields. Nothing of the history is saved,
    and the change goes through the case's own service."""
    from cases.models import Case, CaseEvent

    case = Case.objects.get(pk=done_case.pk)
    client.force_login(lead)
    url = reverse("admin:cases_case_change", args=[case.pk])
    body = client.get(url).content.decode()
    served = dict(
        re.findall(
            r'<input type="hidden" name="([\w-]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"'
            r' value="(\d*)"',
            body,
        )
    )
    assert served
    assert all(value == "0" for name, value in served.items() if "TOTAL" in name)
    events = CaseEvent.objects.filter(case=case).count()

    response = client.post(
        url,
        {
            **served,
            "owner": case.owner_id,
            "backup": case.backup_id or "",
            "outstanding_question": "Did the customer confirm the new date?",
            "next_check_at_0": "",
            "next_check_at_1": "",
            "change_reason": "Asked by phone",
            "expected_version": case.version,
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    case.refresh_from_db()
    assert case.outstanding_question == "Did the customer confirm the new date?"
    assert CaseEvent.objects.filter(case=case).count() > events
