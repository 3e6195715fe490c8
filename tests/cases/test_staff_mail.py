"""Staff notification mail, delivered by the workers through Django's email backend to a real
SMTP server (``tests/support/smtp.py``): handed out once per due time, sent at most once,
retried with backoff while the server refuses, and never a write to the case."""

from __future__ import annotations

import datetime as dt
import socket

import pytest
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from cases.delivery import (
    digests_dispatch_due,
    notification_deliver,
    notifications_dispatch_due,
)
from cases.inbox import preferences_set
from cases.kernel import SYSTEM, apply_transition, lock_case
from cases.models import Case, CaseEvent, Notification
from cases.services import staff_set_away

pytestmark = pytest.mark.django_db


def run(func_path: str, pk: int) -> None:
    """The deliveries handed out run here, as ``run_worker`` runs them."""
    import_string(func_path)(pk)


def _escalate(case: Case) -> Notification:
    """The case needs attention (the system escalates it): its responsible person is told."""
    with transaction.atomic():
        apply_transition(lock_case(case.pk), "escalate", actor=SYSTEM, reason="stuck")
    return Notification.objects.get(case=case, kind="needs_attention")


def test_a_notification_is_mailed_once_with_a_link_to_its_page(smtp, case, lead, settings):
    settings.HOLDFAST_BASE_URL = "https://desk.example"
    notification = _escalate(case)
    assert notifications_dispatch_due(run=run) == 1
    assert notifications_dispatch_due(run=run) == 0  # handed out once per due time
    [mail] = smtp.wait_for(1, timeout=5)
    assert mail.envelope_to == ["lead@example.com"]
    assert case.reference in mail.subject
    assert f"https://desk.example/admin/cases/case/{case.pk}/change/" in mail.body
    assert mail.message["Message-ID"] == f"<notification-{notification.pk}@localhost>"
    notification.refresh_from_db()
    assert notification.email_state == Notification.Email.SENT
    assert notification.email_sent_at is not None
    assert notification_deliver(notification.pk) == "skipped"  # never twice


def test_a_long_reason_is_cut_at_a_word_in_the_subject_and_ends_with_one_full_stop(
    smtp, case, lead
):
    # Seen in a walk: a subject cut mid-word ("Repeating it wo") and "…notified.)." in the body.
    reason = "The order system refused it (" + "a long explanation " * 12 + "and stopped.)"
    with transaction.atomic():
        apply_transition(lock_case(case.pk), "escalate", actor=SYSTEM, reason=reason)
    assert notifications_dispatch_due(run=run) == 1
    [mail] = smtp.wait_for(1, timeout=5)

    subject = mail.subject
    assert len(subject) <= 200
    assert subject.endswith(" a long explanation a long…"), subject
    (first, *_) = mail.body.splitlines()
    assert first.endswith(" a long explanation a…"), first[-40:]  # cut at a word, no "…."


def test_a_refusing_mail_server_is_retried_with_backoff_and_the_case_is_untouched(
    smtp, case, settings
):
    settings.RETRY_BASE_SECONDS = 10
    settings.RETRY_JITTER = 0
    notification = _escalate(case)
    version = Case.objects.get(pk=case.pk).version
    events = CaseEvent.objects.filter(case=case).count()
    smtp.refuse_next = 2
    waits = []
    now = timezone.now()
    for _ in range(2):
        assert notifications_dispatch_due(run=run, now=now) == 1
        notification.refresh_from_db()
        assert notification.email_state == Notification.Email.PENDING
        waits.append((notification.email_due_at - timezone.now()).total_seconds())
        # Not due yet: nothing is handed out before the backoff has passed.
        assert notifications_dispatch_due(run=run) == 0
        now = notification.email_due_at
    assert smtp.refused == 2
    assert 8 < waits[0] <= 10 < waits[1] <= 20  # 10 s, then 20 s
    assert "451" in notification.email_last_error
    assert notifications_dispatch_due(run=run, now=now) == 1
    notification.refresh_from_db()
    assert notification.email_state == Notification.Email.SENT
    assert notification.email_attempts == 2
    assert len(smtp.received) == 1
    # The mail's troubles never wrote the case.
    assert Case.objects.get(pk=case.pk).version == version
    assert CaseEvent.objects.filter(case=case).count() == events


def test_a_mail_server_that_keeps_refusing_is_given_up_on_visibly(smtp, case, settings):
    settings.NOTIFICATION_EMAIL_ATTEMPT_LIMIT = 2
    notification = _escalate(case)
    smtp.refuse_next = 99
    later = timezone.now() + dt.timedelta(days=1)
    notifications_dispatch_due(run=run)
    notifications_dispatch_due(run=run, now=later)
    notification.refresh_from_db()
    assert notification.email_state == Notification.Email.FAILED
    assert notification.email_due_at is None
    assert notifications_dispatch_due(run=run, now=later + dt.timedelta(days=1)) == 0
    assert notification.read_at is None  # still in the inbox


def test_a_server_that_cannot_be_reached_is_retried(case, settings):
    with socket.socket() as sock:  # a local port with nothing listening on it
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", closed_port
    notification = _escalate(case)
    notifications_dispatch_due(run=run)
    notification.refresh_from_db()
    assert notification.email_state == Notification.Email.PENDING
    assert notification.email_attempts == 1
    assert "Connection refused" in notification.email_last_error


def test_a_send_whose_worker_died_is_never_sent_again(smtp, case, settings):
    """At most once: a mark "sending" older than the send lease means the worker stopped
    between the send and its outcome; the mail may have gone, so it is not sent again."""
    settings.NOTIFICATION_SEND_LEASE_SECONDS = 30
    notification = _escalate(case)
    began = timezone.now() - dt.timedelta(seconds=31)
    Notification.objects.filter(pk=notification.pk).update(
        email_state=Notification.Email.SENDING, email_sending_at=began
    )
    assert notifications_dispatch_due(run=run) == 0
    notification.refresh_from_db()
    assert notification.email_state == Notification.Email.UNCERTAIN
    assert "may have gone" in notification.email_last_error
    assert notifications_dispatch_due(run=run, now=timezone.now() + dt.timedelta(hours=1)) == 0
    assert smtp.received == []


def test_a_daily_digest_gathers_the_days_notifications_in_one_mail(
    smtp, make_case, lead, backup, settings
):
    preferences_set(user=lead, email_off=[], digest=True)
    first, second = make_case(), make_case()
    for case in (first, second):
        assert _escalate(case).email_state == Notification.Email.DIGEST
    assert notifications_dispatch_due(run=run) == 0
    assert digests_dispatch_due(run=run) == 0  # not its hour yet
    due = lead.notification_preference.digest_next_at
    assert digests_dispatch_due(run=run, now=due) == 1
    assert digests_dispatch_due(run=run, now=due) == 0  # once a day
    [mail] = smtp.wait_for(1, timeout=5)
    assert mail.envelope_to == ["lead@example.com"]
    assert first.reference in mail.body
    assert second.reference in mail.body
    assert set(Notification.objects.values_list("email_state", flat=True)) == {"sent"}
    lead.notification_preference.refresh_from_db()
    assert lead.notification_preference.digest_next_at == due + dt.timedelta(days=1)


def test_the_backup_gets_the_mail_while_the_owner_is_away(smtp, case, lead, backup):
    staff_set_away(user=lead, away_until=timezone.localdate(), actor=lead)
    _escalate(case)
    notifications_dispatch_due(run=run)
    assert [m.envelope_to for m in smtp.wait_for(1, timeout=5)] == [["backup@example.com"]]


def test_whom_a_waiting_case_is_assigned_to_gets_the_mail_once(
    smtp, case, lead, backup, agent, settings
):
    """The ``assigned`` kind goes out like every other: to the new owner, once."""
    from cases.services import case_assign

    settings.HOLDFAST_BASE_URL = "https://desk.example"
    with transaction.atomic():
        apply_transition(lock_case(case.pk), "escalate", actor=SYSTEM, reason="stuck")
    Notification.objects.update(email_state=Notification.Email.SENT)  # the lead's, gone before
    case = Case.objects.get(pk=case.pk)
    case_assign(
        case=case,
        expected_version=case.version,
        owner=agent,
        backup=backup,
        reason="Ada knows them",
        actor=lead,
    )

    assert notifications_dispatch_due(run=run) == 1
    assert notifications_dispatch_due(run=run) == 0
    [mail] = smtp.wait_for(1, timeout=5)
    assert mail.envelope_to == ["agent@example.com"]
    assert f"{case.reference} waits on you now: it was assigned to you" in mail.subject
    assert f"https://desk.example/admin/cases/case/{case.pk}/change/" in mail.body
    assert Notification.objects.get(kind="assigned").email_state == Notification.Email.SENT
