"""A yes or no read with the case's lock (``cases.rows.Exists``), and the completion's use of it
(``cases.services.CANCELLATION_PENDING``): the written-out statement on PostgreSQL and the
ORM's annotation elsewhere answer the same, and the answer is taken once."""

from __future__ import annotations

import pytest
from django.db import transaction

from cases.kernel import lock_case_at_head
from cases.models import CancellationRequest
from cases.services import CANCELLATION_PENDING, cancellations_mark_after_change

pytestmark = pytest.mark.django_db

RELATED = ("account",)  # what a worker's step reads with the case


def _pending(case) -> CancellationRequest:
    return CancellationRequest.objects.create(case=case, reason="stop", via="api")


def _locked_answer(case) -> bool:
    with transaction.atomic():
        locked, _head = lock_case_at_head(case.pk, RELATED, exists=CANCELLATION_PENDING)
        return locked.cancellation_pending


def test_the_lock_says_whether_a_cancellation_is_pending(make_case):
    case, other = make_case(), make_case()
    assert _locked_answer(case) is False
    settled = _pending(case)
    settled.outcome = CancellationRequest.Outcome.REFUSED
    settled.save(update_fields=["outcome"])
    _pending(other)
    assert _locked_answer(case) is False  # a settled one, and another case's, are not
    _pending(case)
    assert _locked_answer(case) is True


def test_with_none_pending_the_completion_sends_no_update_and_the_answer_is_taken_once(
    make_case, django_assert_num_queries
):
    case = make_case()
    with transaction.atomic():
        locked, _head = lock_case_at_head(case.pk, RELATED, exists=CANCELLATION_PENDING)
        with django_assert_num_queries(0):
            assert cancellations_mark_after_change(locked) == ""
        # A second use of the same instance does not trust the first answer: it looks.
        _pending(case)
        note = cancellations_mark_after_change(locked)
    assert note.startswith("Cancellation arrived after the change")
    (request,) = CancellationRequest.objects.filter(case=case)
    assert request.outcome == CancellationRequest.Outcome.ARRIVED_AFTER_CHANGE


def test_a_case_read_without_the_answer_always_looks(make_case):
    case = make_case()
    _pending(case)
    with transaction.atomic():
        locked, _head = lock_case_at_head(case.pk, RELATED)
        assert cancellations_mark_after_change(locked)
    assert not CancellationRequest.objects.filter(
        case=case, outcome=CancellationRequest.Outcome.PENDING
    ).exists()
