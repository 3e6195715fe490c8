"""Every admin list page's rows, written out by ``cases.admin.list_rows``, are Django's rows to
the character: on the demo's data (a case of every kind and state, their events, proposals,
notifications, accounts, teams), for every model the admin lists, filtered (the preserved
filters in each row's link) and sorted, with an owner away and an empty value in a column."""

from __future__ import annotations

import datetime as dt
import io
import re

import pytest
from django.contrib import admin
from django.contrib.admin.templatetags import admin_list
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from cases.admin import list_rows
from cases.models import Case, CustomerAccount, StaffProfile, Status, WaitingOn


@pytest.fixture
def desk(db, client):
    call_command("load_demo", stdout=io.StringIO())
    # Someone away (the case list's "responsible now" names the backup), a case with no
    # next check (an empty value shown as "—").
    lead = get_user_model().objects.get(username="lead")
    StaffProfile.objects.update_or_create(
        user=lead, defaults={"away_until": timezone.localdate() + dt.timedelta(days=3)}
    )
    now = timezone.now()
    first, second, third = Case.objects.order_by("pk")[:3]
    Case.objects.filter(pk=first.pk).update(status=Status.DONE, next_check_at=None)
    # A row of each way a case shows: closed, held while the workers settle it, overdue.
    Case.objects.filter(pk=second.pk).update(
        status=Status.HELD, next_check_at=now + dt.timedelta(minutes=5)
    )
    Case.objects.filter(pk=third.pk).update(
        status=Status.NEEDS_ATTENTION,
        waiting_on=WaitingOn.OWNER,
        follow_up_at=now - dt.timedelta(hours=2),
        next_check_at=now - dt.timedelta(days=2),
    )
    # Text that must be escaped, in a column reached through a relation (the account).
    CustomerAccount.objects.filter(pk=first.account_id).update(name='<b>Nor & "wind"</b>')
    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(root)
    return client


def _changelists() -> list[str]:
    return sorted(
        f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"
        for model in admin.site._registry
    )


def _both(cl) -> tuple[list[str], list[str]]:
    ours = ["".join(row) for row in list_rows.rows(cl)]
    django = ["".join(row) for row in admin_list.results(cl)]
    return ours, django


@pytest.mark.parametrize("name", _changelists())
def test_every_list_page_writes_djangos_rows(desk, name):
    response = desk.get(reverse(name), follow=True)  # the approver queue opens filtered
    if response.status_code != 200 or "cl" not in (response.context or {}):
        pytest.skip(f"{name}: no list to show ({response.status_code})")
    ours, django = _both(response.context["cl"])

    assert ours == django


@pytest.mark.parametrize(
    "params",
    [
        {"status__exact": "needs_attention"},
        {"o": "-2.1"},
        {"q": "D-4"},
        {"status__exact": "held", "o": "3"},
    ],
)
def test_the_case_lists_filtered_and_sorted_rows_are_djangos(desk, params):
    response = desk.get(reverse("admin:cases_case_changelist"), params)
    cl = response.context["cl"]
    ours, django = _both(cl)

    assert ours
    assert ours == django
    if "status__exact" in params:
        # Each row's link keeps the page's filters, as Django's does.
        status = params["status__exact"]
        assert f"?_changelist_filters=status__exact%3D{status}" in ours[0]


def test_the_page_shows_the_written_rows(desk):
    """The template wiring: the list page renders the rows of ``list_rows``, once per row."""
    case = Case.objects.get(reference="D-41")
    response = desk.get(reverse("admin:cases_case_changelist"), {"status__exact": case.status})
    html = response.content.decode()
    link = reverse("admin:cases_case_change", args=[case.pk])

    assert re.search(
        rf'<tr><td class="action-checkbox"><input type="checkbox" name="_selected_action" '
        rf'value="{case.pk}" class="action-select" aria-label="Select this object for an '
        rf'action - D-41"></td><th class="field-reference"><a href="{re.escape(link)}'
        rf'\?_changelist_filters=status__exact%3D{case.status}">D-41</a></th>',
        html,
    )


def test_a_popup_and_an_editable_list_keep_djangos_rendering(desk):
    response = desk.get(reverse("admin:cases_case_changelist"), {"_popup": "1"})
    cl = response.context["cl"]
    ours, django = _both(cl)

    assert cl.is_popup
    assert ours == django
    # Each cell is its own item there, as Django's (one string per row only on a plain page).
    assert len(next(iter(list_rows.rows(cl)))) == len(cl.list_display)


def test_a_row_id_that_is_not_a_number_links_as_django_reverses_it(desk):
    """The link's marker is replaced only for integer ids: any other id is reversed as Django
    reverses it (quoted)."""
    response = desk.get(reverse("admin:cases_case_changelist"))
    cl = response.context["cl"]
    links = list_rows._Links(cl)
    case = cl.result_list[0]
    text_id = Case(pk="A/b_1")  # type: ignore[misc]

    assert links(case) == cl.url_for_result(case)
    assert links(text_id) == cl.url_for_result(text_id)
    assert "A_2Fb_5F1" in links(text_id)


def test_a_column_given_as_a_callable_is_named_as_django_names_it():
    def shown(obj):  # pragma: no cover - only named
        return obj

    for index, name in enumerate(["reference", shown, lambda obj: obj]):
        assert list_rows._css_name(name, index) == admin_list._coerce_field_name(name, index)
