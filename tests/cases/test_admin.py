"""The support desk admin: filters, search, the case page, buttons that call services."""

from __future__ import annotations

import datetime as dt
import html

import pytest
from django.urls import reverse
from django.utils import timezone

from cases.case_story import event_sentence
from cases.models import Case, CaseEvent, CustomerAccount, Status
from cases.services import case_assign, case_transition, case_update_followup
from tests.cases.helpers import events_after, last_event_id, reload

CHANGELIST = "admin:cases_case_changelist"
TOMORROW = timezone.now() + dt.timedelta(days=1)


def _change_url(case):
    return reverse("admin:cases_case_change", args=[case.pk])


def _transition_url(case, name):
    return reverse("admin:cases_case_transition", args=[case.pk, name])


def _listed(client, **params):
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return {case.reference for case in response.context["cl"].result_list}


def _change_form_data(client, case, **overrides):
    """What the change form posts when nothing is edited, plus ``overrides``."""
    page = client.get(_change_url(case))
    assert page.status_code == 200
    next_check = timezone.localtime(case.next_check_at) if case.next_check_at else None
    data = {
        "owner": case.owner_id,
        "backup": case.backup_id or "",
        "outstanding_question": case.outstanding_question,
        "next_check_at_0": next_check.strftime("%Y-%m-%d") if next_check else "",
        "next_check_at_1": next_check.strftime("%H:%M:%S") if next_check else "",
        "change_reason": "",
        "expected_version": case.version,
    }
    for inline in page.context["inline_admin_formsets"]:
        prefix = inline.formset.prefix
        data.update(
            {
                f"{prefix}-TOTAL_FORMS": 0,
                f"{prefix}-INITIAL_FORMS": 0,
                f"{prefix}-MIN_NUM_FORMS": 0,
                f"{prefix}-MAX_NUM_FORMS": 1000,
            }
        )
    data.update(overrides)
    return data


@pytest.fixture
def as_lead(client, lead):
    client.force_login(lead)
    return client


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


# --- list filters and search ----------------------------------------------------------------


@pytest.fixture
def desk(make_case, lead, backup, team):
    """Four cases: waiting, escalated (waiting on the owner), overdue, and handed to backup."""
    waiting, escalated, overdue, handed_over = (make_case() for _ in range(4))
    for case in (waiting, escalated, handed_over):
        case_update_followup(
            case=case, expected_version=case.version, actor=lead, next_check_at=TOMORROW
        )
    case_update_followup(
        case=overdue,
        expected_version=overdue.version,
        actor=lead,
        next_check_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
    )
    escalated = reload(escalated)
    case_transition(
        case=escalated,
        transition="escalate",
        expected_version=escalated.version,
        reason="Needs a person",
        actor=lead,
    )
    handed_over = reload(handed_over)
    case_assign(
        case=handed_over,
        expected_version=handed_over.version,
        owner=backup,
        backup=lead,
        reason="handover",
        actor=lead,
    )
    return {
        "waiting": waiting.reference,
        "escalated": escalated.reference,
        "overdue": overdue.reference,
        "handed_over": handed_over.reference,
    }


def test_changelist_filters_by_status(as_lead, desk):
    assert _listed(as_lead, status__exact="needs_attention") == {desk["escalated"]}
    assert _listed(as_lead, status__exact="waiting_source") == (
        set(desk.values()) - {desk["escalated"]}
    )


def test_changelist_filters_by_waiting_on(as_lead, desk):
    assert _listed(as_lead, waiting_on__exact="owner") == {desk["escalated"]}


def test_changelist_filters_by_owner(as_lead, desk, backup, lead):
    assert _listed(as_lead, owner=backup.pk) == {desk["handed_over"]}
    assert _listed(as_lead, owner=lead.pk) == set(desk.values()) - {desk["handed_over"]}


def test_show_counts_counts_each_filter_s_choices(as_lead, desk, backup, lead):
    # "Show counts" (?_facets=True) asks each filter's queryset with the choice itself, an int
    # for the person filters: a 500 before ('int' object has no attribute 'isascii').
    page = as_lead.get("/admin/cases/case/", {"_facets": "True"})

    assert page.status_code == 200
    body = page.content.decode()
    assert f"?_facets=True&amp;owner={backup.pk}" in body
    assert "(1)" in body  # backup owns the one handed-over case


def test_changelist_filters_by_responsible_now(as_lead, desk, backup, lead, owner_away):
    # Lena is away: her cases fall to Bo, and Bo's handed-over case falls to nobody else.
    assert _listed(as_lead, responsible=backup.pk) == set(desk.values())
    assert _listed(as_lead, responsible=lead.pk) == set()


def test_changelist_filters_by_overdue_follow_up(as_lead, desk):
    assert _listed(as_lead, overdue="yes") == {desk["overdue"]}
    assert _listed(as_lead, overdue="no") == set(desk.values()) - {desk["overdue"]}


def test_changelist_filters_by_team(client, superuser, desk, other_case, team, other_team):
    client.force_login(superuser)

    assert _listed(client, team=team.pk) == set(desk.values())
    assert _listed(client, team=other_team.pk) == {other_case.reference}


def test_changelist_search_by_reference_order_and_account(as_lead, make_case, team):
    special = CustomerAccount.objects.create(
        reference="ACC-777", name="Westwind Dairy", team=team, verified=True
    )
    plain = make_case(order_id="ORD-1111")
    by_order = make_case(order_id="ORD-5555")
    by_account = make_case(account=special, order_id="ORD-2222")

    assert _listed(as_lead, q=plain.reference) == {plain.reference}
    assert _listed(as_lead, q="ORD-5555") == {by_order.reference}
    assert _listed(as_lead, q="ACC-777") == {by_account.reference}
    assert _listed(as_lead, q="Westwind") == {by_account.reference}


def test_changelist_shows_backup_as_responsible_while_owner_away(as_lead, case, owner_away):
    response = as_lead.get(reverse(CHANGELIST))

    assert b"backup <small>(backup; owner away)</small>" in response.content


# --- the case page -----------------------------------------------------------------------------


def test_case_page_shows_next_action_panel_first(as_lead, case):
    response = as_lead.get(_change_url(case))

    assert response.status_code == 200
    content = response.content.decode()
    assert 'aria-label="What may happen next"' in content
    assert "Waiting for the order system: a worker reads the order first." in content
    assert content.index("What may happen next") < content.index('name="owner"')
    assert response.context["next_action"].headline.startswith("Waiting for the order system")


@pytest.mark.parametrize(
    ("who", "expected"),
    [("lead", ["escalate", "cancel", "stop"]), ("agent", ["escalate", "cancel"]), ("auditor", [])],
)
def test_case_page_has_one_button_per_permitted_transition(client, case, request, who, expected):
    client.force_login(request.getfixturevalue(who))

    response = client.get(_change_url(case))

    assert [t["name"] for t in response.context["case_transitions"]] == expected
    content = response.content.decode()
    assert content.count(f"/admin/cases/case/{case.pk}/transition/") == len(expected)
    for name in expected:
        assert f'href="{_transition_url(case, name)}"' in content


def test_case_page_shows_backup_while_owner_away(as_lead, case, owner_away):
    response = as_lead.get(_change_url(case))

    content = response.content.decode()
    assert "Bo Backup (backup), the named backup while Lena Lead is away" in content
    assert "Bo Backup (backup) is responsible for following up" in content


def test_case_page_shows_the_event_timeline(as_lead, case):
    response = as_lead.get(_change_url(case))

    assert "Audit trail (append-only" in response.content.decode()
    assert "What happened" in response.content.decode()
    assert "cases.<wbr>case.<wbr>created" in response.content.decode()


def test_case_pages_audit_trail_and_evidence_read_in_words_with_the_codes_under_them(
    as_lead, case, lead
):
    """The audit trail's rows read "cases.case.transitioned" from "new" to "waiting_source",
    and the evidence's kind "order_read": the codes a person cannot read. Each event now reads
    as in the timeline, its code under it, and a worker's evidence kind in words."""
    from cases import services

    recorded = [
        ("order_system", "ORD-7731@v1", "order_read", "Read the order"),
        ("email", "msg-1", "customer_request", "The customer's mail"),
    ]
    for offset, (source, reference, kind, summary) in enumerate(recorded):
        services.evidence_record(
            case=case,
            expected_version=case.version + offset,
            actor=lead,
            source_system=source,
            external_reference=reference,
            kind=kind,
            permitted_basis="contract",
            summary=summary,
        )

    body = as_lead.get(_change_url(case)).content.decode()

    trail = body[body.index("Audit trail (append-only") :]
    trail = trail[: trail.index("</table>")]
    for event in case.events.all():
        assert html.escape(event_sentence(event).text) in trail, event.action
    assert trail.count("cases.<wbr>evidence.<wbr>recorded") == 2
    for raw in ('<td class="field-action">', '<td class="field-from_status">', "waiting_source<"):
        assert raw not in trail, raw
    evidence = body[body.index("Evidence references") :]
    assert "The order as read" in evidence
    assert "Customer request" in evidence
    assert '<td class="field-kind">' not in evidence


def test_transition_button_asks_for_a_reason(as_lead, case):
    response = as_lead.get(_transition_url(case, "escalate"))

    assert response.status_code == 200
    assert response.context["form"].fields["reason"].required
    assert response.context["form"].initial["expected_version"] == case.version


def test_transition_posted_through_the_admin_calls_the_service(as_lead, lead, case):
    before_id, version = last_event_id(case), case.version

    response = as_lead.post(
        _transition_url(case, "escalate"),
        {"expected_version": version, "reason": "Customer phoned again"},
    )

    assert response.status_code == 302
    assert response.url == _change_url(case)
    fresh = reload(case)
    (event,) = events_after(case, before_id)
    assert (fresh.status, fresh.version) == (Status.NEEDS_ATTENTION, version + 1)
    assert (event.action, event.version, event.actor, event.reason) == (
        "cases.case.transitioned",
        version + 1,
        lead,
        "Customer phoned again",
    )


def test_transition_through_the_admin_without_reason_writes_nothing(as_lead, case):
    before_id = last_event_id(case)

    as_lead.post(
        _transition_url(case, "escalate"), {"expected_version": case.version, "reason": ""}
    )

    assert events_after(case, before_id) == []
    assert reload(case).status == Status.WAITING_SOURCE


def test_transition_through_the_admin_with_stale_version_is_refused(as_lead, lead, case):
    stale = case.version
    case_transition(
        case=case, transition="escalate", expected_version=stale, reason="someone else", actor=lead
    )
    before_id = last_event_id(case)

    response = as_lead.post(
        _transition_url(case, "cancel"),
        {"expected_version": stale, "reason": "I saw an older page"},
        follow=True,
    )

    assert events_after(case, before_id) == []
    assert reload(case).status == Status.NEEDS_ATTENTION
    assert any("changed while you were deciding" in str(m) for m in response.context["messages"])


def test_admin_transition_page_for_unknown_name_is_not_found(as_lead, case):
    assert as_lead.get(_transition_url(case, "no_such_transition")).status_code == 404


def test_worker_transition_posted_through_the_admin_is_refused(as_lead, case):
    before_id = last_event_id(case)

    as_lead.post(
        _transition_url(case, "claim"),
        {"expected_version": case.version, "reason": "let me apply it"},
    )

    assert events_after(case, before_id) == []
    assert reload(case).status == Status.WAITING_SOURCE


def test_assigning_owner_and_backup_in_the_admin_writes_a_reassigned_event(
    as_lead, lead, backup, agent, case
):
    case = reload(case)
    before_id, version = last_event_id(case), case.version
    data = _change_form_data(
        as_lead, case, owner=backup.pk, backup=agent.pk, change_reason="Lena is on leave"
    )

    response = as_lead.post(_change_url(case), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    fresh = reload(case)
    assert (fresh.owner, fresh.backup, fresh.version) == (backup, agent, version + 1)
    (event,) = events_after(case, before_id)
    assert (event.action, event.version, event.actor, event.reason) == (
        "cases.case.reassigned",
        version + 1,
        lead,
        "Lena is on leave",
    )
    assert event.detail["after"] == {"owner": "backup", "backup": "agent"}


def _someone_else_acts_first(case, lead) -> None:
    """The case moves on (a version later) while a page of it is open."""
    case_transition(
        case=case,
        transition="escalate",
        expected_version=case.version,
        reason="someone else acted first",
        actor=lead,
    )


def test_admin_assignment_with_stale_version_overwrites_nothing(as_lead, lead, backup, agent, case):
    case = reload(case)
    data = _change_form_data(as_lead, case, owner=backup.pk, backup=agent.pk)
    _someone_else_acts_first(case, lead)
    before_id = last_event_id(case)

    as_lead.post(_change_url(case), data)

    assert events_after(case, before_id) == []
    assert (reload(case).owner, reload(case).backup) == (lead, backup)


def test_a_stale_save_keeps_what_was_typed_and_the_next_save_goes_through(as_lead, lead, case):
    # Refused after a redirect before: the typed question was replaced by the old one.
    case = reload(case)
    typed = "Which Friday did the customer mean?"
    data = _change_form_data(as_lead, case, outstanding_question=typed)
    _someone_else_acts_first(case, lead)
    current = reload(case).version

    refused = as_lead.post(_change_url(case), data)

    assert refused.status_code == 200  # the page again, not a redirect
    body = refused.content.decode()
    assert "What you typed is kept below" in body
    assert typed in body
    assert f'name="expected_version" value="{current}"' in body
    assert reload(case).outstanding_question != typed

    saved = as_lead.post(_change_url(case), {**data, "expected_version": current})

    assert saved.status_code == 302
    assert reload(case).outstanding_question == typed


def test_admin_cannot_assign_someone_outside_the_team(as_lead, lead, case, outsider):
    case = reload(case)
    before_id = last_event_id(case)

    response = as_lead.post(_change_url(case), _change_form_data(as_lead, case, owner=outsider.pk))

    assert response.status_code == 200  # the form is shown again with the error
    assert "owner" in response.context["adminform"].form.errors
    assert events_after(case, before_id) == []
    assert reload(case).owner == lead


def test_making_the_backup_the_owner_too_is_refused_in_words_and_the_page_states_the_case(
    as_lead, lead, backup, case
):
    """The refusal read 'Constraint "case_backup_is_not_owner" is violated.' and the page
    above it said "Responsible now: Bo Backup, the owner", read from the refused form."""
    case = reload(case)
    before_id = last_event_id(case)

    response = as_lead.post(_change_url(case), _change_form_data(as_lead, case, owner=backup.pk))

    assert response.status_code == 200
    body = response.content.decode()
    assert "The backup must be someone other than the owner." in body
    assert "case_backup_is_not_owner" not in body
    assert response.context["original"].owner == lead  # the page's case is the stored one
    assert events_after(case, before_id) == []
    assert (reload(case).owner, reload(case).backup) == (lead, backup)


def test_admin_delete_is_an_authority_revocation_and_keeps_the_row(client, superuser, case):
    client.force_login(superuser)

    confirm = client.get(reverse("admin:cases_case_delete", args=[case.pk]))
    assert confirm.status_code == 200
    page = confirm.content.decode()
    # What the button said, not "Delete"; what will happen, not what has.
    assert f"<title>Revoke authority over {case.reference}?" in page
    assert f"<h1>Revoke authority over {case.reference}?</h1>" in page
    assert "&rsaquo; Revoke authority" in page
    assert ">Delete<" not in page
    assert f"{case.reference}: its authority will be revoked and its unsettled work" in page
    response = client.post(reverse("admin:cases_case_delete", args=[case.pk]), {"post": "yes"})

    assert response.status_code == 302
    case = reload(case)  # the row is still there: nothing disappears with its audit trail
    assert case.status == "stopped"
    assert case.revoked_at is not None
    assert case.revocation_kind == "deleted"
    actions = list(case.events.values_list("action", flat=True))
    assert "cases.revocation.requested" in actions
    assert "cases.revocation.unsettled_discovered" in actions


def test_bulk_delete_goes_through_revocation(client, superuser, make_case):
    client.force_login(superuser)
    first, second = make_case(), make_case()

    listing = client.get(reverse(CHANGELIST))
    assert b"revoke_selected" in listing.content
    assert b'value="delete_selected"' not in listing.content
    client.post(
        reverse(CHANGELIST),
        {
            "action": "revoke_selected",
            "_selected_action": [first.pk, second.pk],
        },
    )

    assert {reload(first).status, reload(second).status} == {"stopped"}


def test_agents_cannot_delete_and_add_leads_to_the_intake(client, agent, superuser, case):
    client.force_login(agent)
    assert (
        client.post(reverse("admin:cases_case_delete", args=[case.pk]), {"post": "yes"}).status_code
        == 403
    )
    assert reload(case).revoked_at is None
    # "Add" is the intake page (a case comes from intake, never a blank form).
    client.force_login(superuser)
    response = client.get(reverse("admin:cases_case_add"))
    assert response.status_code == 302
    assert response.url == reverse("admin:cases_case_intake")
    assert client.post(reverse("admin:cases_case_add"), {"reference": "D-1"}).status_code == 302
    assert Case.objects.count() == 1


# --- the auditor -------------------------------------------------------------------------------


@pytest.fixture
def as_auditor(client, auditor):
    client.force_login(auditor)
    return client


def test_auditor_sees_the_case_page_read_only(as_auditor, case):
    response = as_auditor.get(_change_url(case))

    assert response.status_code == 200
    assert response.context["case_transitions"] == []
    assert response.context["evidence_form"] is None
    assert b'name="_save"' not in response.content


def test_auditor_change_post_is_refused(as_auditor, auditor, case):
    case = reload(case)
    before_id = last_event_id(case)

    response = as_auditor.post(
        _change_url(case),
        {"owner": auditor.pk, "expected_version": case.version, "change_reason": "mine"},
    )

    assert response.status_code == 403
    assert events_after(case, before_id) == []


def test_auditor_transition_post_writes_nothing(as_auditor, case):
    before_id = last_event_id(case)

    response = as_auditor.post(
        _transition_url(case, "cancel"),
        {"expected_version": case.version, "reason": "audit"},
        follow=True,
    )

    assert events_after(case, before_id) == []
    assert reload(case).status == Status.WAITING_SOURCE
    assert any("may not" in str(m) for m in response.context["messages"])


def test_auditor_cannot_record_evidence(as_auditor, case):
    before_id = last_event_id(case)

    as_auditor.post(
        reverse("admin:cases_case_evidence", args=[case.pk]),
        {
            "evidence-expected_version": case.version,
            "evidence-source_system": "email",
            "evidence-external_reference": "msg-1",
            "evidence-kind": "customer_request",
            "evidence-permitted_basis": "contract",
            "evidence-summary": "planted",
        },
    )

    assert not case.evidence.exists()
    assert events_after(case, before_id) == []


def test_lead_records_evidence_through_the_admin(as_lead, lead, case):
    before_id, version = last_event_id(case), case.version

    as_lead.post(
        reverse("admin:cases_case_evidence", args=[case.pk]),
        {
            "evidence-expected_version": version,
            "evidence-source_system": "email",
            "evidence-external_reference": "msg-1",
            "evidence-kind": "customer_request",
            "evidence-permitted_basis": "contract",
            "evidence-summary": "Customer asked for Friday",
        },
    )

    evidence = case.evidence.get()
    assert (evidence.external_reference, evidence.recorded_by) == ("msg-1", "lead")
    (event,) = events_after(case, before_id)
    assert (event.action, event.version) == ("cases.evidence.recorded", version + 1)
    assert CaseEvent.objects.filter(case=case).count() == 3
