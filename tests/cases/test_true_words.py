"""Every sentence of a case page is true in the state the case is in.

The cancel button and its confirm page follow the case's attempts and operations (nothing sent,
tried and refused, applied, in flight, finished); a held case says whether the workers still
settle it by themselves or a person must; "did not answer" and "said it was unavailable" are
told apart. Cases are brought to each state by the services and the real workers against the
live reference order system.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from cases.actions import case_actions, get_action
from cases.models import Status
from cases.next_action import describe_next_action, status_label
from reconciliation.apply import apply_case
from reconciliation.exceptions import Transient, plain_failure
from reconciliation.settle import case_reconcile
from tests.cases.helpers import reload

pytestmark = pytest.mark.order_system

UNSENT = "nothing has been sent"


def _cancel(case):
    action = get_action("cancel")
    assert action is not None
    return action


def _held(approved_case, live_orders):
    case = approved_case()
    live_orders.set_fault("drop_after_commit", path_prefix=f"/orders/{case.order_id}/operations")
    assert apply_case(case_id=case.pk) == "effect_unknown"
    live_orders.clear_faults()
    return reload(case)


def test_an_unsent_case_offers_a_cancellation_that_says_nothing_was_sent(case):
    case = reload(case)
    action = _cancel(case)

    assert action.available(case)
    assert action.label_for(case) == "Cancel the request"
    assert UNSENT in action.words_for(case)
    assert action.confirm_for(case).startswith("Nothing has been sent")


def test_a_held_case_the_workers_settle_names_their_next_look_and_no_person(
    approved_case, live_orders
):
    case = _held(approved_case, live_orders)
    assert case.next_check_at is not None

    said = describe_next_action(case)

    assert status_label(case) == "Held: the workers are reconciling it"
    assert "The workers are settling it themselves" in said.headline
    assert said.who_must_answer.startswith("nobody yet: the workers settle it themselves")
    assert "The workers look again at" in said.follow_up
    assert "check 1 of" in said.follow_up
    cancel = _cancel(case)
    assert cancel.label_for(case) == "Request cancellation"
    assert UNSENT not in cancel.words_for(case)
    assert "Nothing has been sent" not in cancel.confirm_for(case)


def test_a_held_case_whose_checks_ran_out_names_the_person_who_must_settle_it(
    approved_case, live_orders, settings
):
    settings.RECONCILE_ATTEMPT_LIMIT = 1
    case = _held(approved_case, live_orders)
    live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}/fence")

    assert case_reconcile(case_id=case.pk) == "still held: a person settles it"

    case = reload(case)
    said = describe_next_action(case)
    assert case.next_check_at is None
    assert status_label(case) == "Held: a person must settle it"
    assert "no longer look by themselves" in said.headline
    assert said.who_must_answer == (
        "Lena Lead (lead), the responsible person, must settle it from the order system's evidence"
    )
    assert "workers look again" not in said.text
    # What the order system did, in words: it answered, and said it was unavailable.
    assert "said it was unavailable" in case.last_error
    assert "did not answer" not in case.last_error


def test_did_not_answer_and_said_unavailable_are_told_apart():
    assert plain_failure(Transient("no_answer")) == "did not answer"
    assert plain_failure(Transient("unavailable")) == "said it was unavailable"
    assert plain_failure(Transient("connect_failed")) == "could not be reached"


def test_a_case_proven_applied_offers_no_cancellation_that_claims_nothing_was_sent(
    approved_case, live_orders
):
    case = _held(approved_case, live_orders)
    assert case_reconcile(case_id=case.pk) == "applied"
    case = reload(case)
    assert case.status == Status.READY
    assert not case.nothing_applied()

    cancel = _cancel(case)
    said = describe_next_action(case)

    assert cancel.available(case)
    assert cancel.label_for(case) == "Record the customer's cancellation"
    assert "already applied" in cancel.words_for(case)
    assert "already applied" in cancel.confirm_for(case)
    assert "Nothing has been sent" not in cancel.confirm_for(case)
    assert UNSENT not in said.text
    assert said.headline.startswith("Applied: the change is confirmed")
    # The heading's status too: "Ready to apply" read as if the change were still to be sent.
    assert said.status == "Applied: finishing the steps after it"


def test_a_done_case_offers_no_cancellation_and_its_confirm_page_refuses(
    approved_case, client, agent
):
    case = approved_case()
    assert apply_case(case_id=case.pk) == "done"
    case = reload(case)

    assert "cancel" not in [a.name for a in case_actions(case, agent)]
    assert UNSENT not in describe_next_action(case, actor=agent).text

    client.force_login(agent)
    url = reverse("admin:cases_case_transition", args=[case.pk, "cancel"])
    page = client.get(url, follow=True)

    assert page.redirect_chain[0][0] == reverse("admin:cases_case_change", args=[case.pk])
    text = page.content.decode()
    assert "Nothing has been sent" not in text
    assert f"is not possible now: {case.reference} is done" in text


def test_a_confirm_page_is_not_shown_to_a_role_that_may_not_take_the_action(case, client, agent):
    client.force_login(agent)
    url = reverse("admin:cases_case_transition", args=[case.pk, "stop"])

    page = client.get(url, follow=True)

    assert "is not offered to you" in page.content.decode()
    assert "Yes, stop" not in page.content.decode()


def test_a_held_case_the_workers_may_not_settle_names_a_person_not_their_next_look(
    approved_case, live_orders, settings
):
    case = _held(approved_case, live_orders)
    assert case.next_check_at is not None
    # An order system nobody probed: review only, so no worker settles a held case of it.
    settings.ORDER_SYSTEM_URL = "http://never-probed.test"

    said = describe_next_action(case)

    assert status_label(case) == "Held: a person must settle it"
    assert "must settle it from the order system's evidence" in said.who_must_answer
    assert "workers look again" not in said.text
    assert "settling it themselves" not in said.text


def test_a_source_check_answered_unavailable_is_not_called_no_answer(case, live_orders):
    from reconciliation.sources import source_check

    live_orders.set_fault("unavailable", path_prefix=f"/orders/{case.order_id}")

    source_check(case_id=case.pk)

    case = reload(case)
    assert case.status == Status.WAITING_SOURCE
    assert case.waiting_reason.startswith("The order system said it was unavailable (1 of ")
    event = case.events.order_by("-id").first()
    assert event.reason.startswith("The order system said it was unavailable (unavailable)")
    assert "did not answer" not in case.waiting_reason + event.reason
