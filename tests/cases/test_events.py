"""The audit trail is append-only: neither the ORM nor the admin edits or deletes an event."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.urls import reverse

from cases.models import CaseEvent


@pytest.fixture
def event(case):
    return CaseEvent.objects.filter(case=case).order_by("id").first()


def _unchanged(event):
    stored = CaseEvent.objects.get(pk=event.pk)
    return (stored.reason, stored.version, stored.action) == (
        "Customer request received",
        1,
        "cases.case.created",
    )


def test_saving_an_existing_event_raises(event):
    event.reason = "rewritten history"

    with pytest.raises(PermissionError):
        event.save()

    assert _unchanged(event)


def test_saving_an_existing_event_with_update_fields_raises(event):
    event.reason = "rewritten history"

    with pytest.raises(PermissionError):
        event.save(update_fields=["reason"])

    assert _unchanged(event)


def test_deleting_an_event_raises(event):
    with pytest.raises(PermissionError):
        event.delete()

    assert CaseEvent.objects.filter(pk=event.pk).exists()


def test_queryset_update_of_events_raises(event):
    with pytest.raises(PermissionError):
        CaseEvent.objects.filter(pk=event.pk).update(reason="rewritten history")

    assert _unchanged(event)


def test_queryset_delete_of_events_raises(case, event):
    with pytest.raises(PermissionError):
        CaseEvent.objects.all().delete()

    assert CaseEvent.objects.filter(case=case).count() == 2


def test_related_manager_cannot_update_or_delete_events(case, event):
    with pytest.raises(PermissionError):
        case.events.update(reason="rewritten history")
    with pytest.raises(PermissionError):
        case.events.all().delete()

    assert _unchanged(event)
    assert case.events.count() == 2


def test_bulk_update_of_events_raises(event):
    event.reason = "rewritten history"

    # bulk_update runs in atomic(savepoint=False); a savepoint keeps the test's transaction usable.
    with pytest.raises(PermissionError), transaction.atomic():
        CaseEvent.objects.bulk_update([event], ["reason"])

    assert _unchanged(event)


def test_update_or_create_cannot_rewrite_an_event(event):
    with pytest.raises(PermissionError):
        CaseEvent.objects.update_or_create(pk=event.pk, defaults={"reason": "rewritten"})

    assert _unchanged(event)


def test_base_manager_cannot_update_or_delete_events(case, event):
    """Django's documented ``Model._base_manager`` is part of the ORM too."""
    with pytest.raises(PermissionError):
        CaseEvent._base_manager.filter(pk=event.pk).update(reason="rewritten history")
    with pytest.raises(PermissionError):
        CaseEvent._base_manager.filter(case=case).delete()

    assert _unchanged(event)


# --- the admin -----------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["lead", "superuser"])
def test_admin_offers_no_add_change_or_delete_for_events(
    client, lead, event, who, django_user_model
):
    user = (
        lead
        if who == "lead"
        else django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    )
    client.force_login(user)
    change_url = reverse("admin:cases_caseevent_change", args=[event.pk])

    listing = client.get(reverse("admin:cases_caseevent_changelist"))
    assert listing.status_code == 200
    assert event in listing.context["cl"].result_list
    assert client.get(reverse("admin:cases_caseevent_add")).status_code == 403
    assert client.post(reverse("admin:cases_caseevent_add"), {"reason": "x"}).status_code == 403

    page = client.get(change_url)
    assert page.status_code == 200  # view only
    assert b'name="_save"' not in page.content
    assert b'class="deletelink"' not in page.content

    assert client.post(change_url, {"reason": "rewritten history"}).status_code == 403
    delete_url = reverse("admin:cases_caseevent_delete", args=[event.pk])
    assert client.get(delete_url).status_code == 403
    assert client.post(delete_url, {"post": "yes"}).status_code == 403
    assert _unchanged(event)


def test_admin_event_list_has_no_bulk_delete_action(client, lead, event):
    client.force_login(lead)

    listing = client.get(reverse("admin:cases_caseevent_changelist"))

    assert "delete_selected" not in listing.context["cl"].model_admin.get_actions(
        listing.wsgi_request
    )
    assert b'name="action"' not in listing.content


def test_the_audit_trail_reads_in_words_with_the_code_kept(client, auditor, case):
    """The auditor's list said "cases.case.created" and "v1: — → waiting_source": the events
    now read as the case's timeline does, the stored code under the words (it is what the
    action filter names), and the statuses by their names."""
    from cases.case_story import event_sentence, status_label

    first = case.events.order_by("id").first()
    client.force_login(auditor)

    listing = client.get(reverse("admin:cases_caseevent_changelist")).content.decode()

    sentence = event_sentence(first).text
    assert sentence
    assert sentence != first.action
    assert sentence in listing
    assert '<small class="hf-code">cases.<wbr>case.<wbr>created</small>' in listing
    assert f"v{first.version}: — → {status_label(first.to_status)}" in listing
    assert "→ waiting_source" not in listing

    page = client.get(reverse("admin:cases_caseevent_change", args=[first.pk])).content.decode()
    words_at = page.index(sentence, page.index("What happened"))  # the field, not the title
    assert words_at < page.index("Namespaced code")
    # Titled and crumbed by what happened (was "D-1 v1: cases.case.created"), the statuses by
    # their names (was "To status: waiting_source").
    assert f"<title>{case.reference} v1: {sentence} | View case event" in page
    assert f"&rsaquo; {case.reference} v1: {sentence}" in page  # the breadcrumb
    assert f"v1: {first.action}" not in page
    assert status_label(first.to_status) in page
    assert f'<div class="readonly">{first.to_status}</div>' not in page
