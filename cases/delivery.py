"""Staff notification mail: delivered by the workers from the database, never touching a case.

A notification to be mailed has a due time (``email_due_at``). The sweep hands due mail out
like every other due work (:func:`notifications_dispatch_due`): a compare-and-set moves the due
time on by the send lease and only the sweep that moved it enqueues the delivery; a delivery
whose task was lost is due again once the lease has passed.

One delivery (:func:`notification_deliver`):

1. opens the connection to the mail server (nothing is sent yet: a refusal here is retried);
2. marks the notification *sending* with a compare-and-set on the due time it was handed out
   with (only one worker ever marks it);
3. sends the message through Django's email backend;
4. marks it *sent* -- or, when the server answered with a refusal, *pending* again with the
   next try on a bounded backoff (``cases.backoff``), until ``NOTIFICATION_EMAIL_ATTEMPT_LIMIT``
   tries have failed (then *failed*, shown in the inbox).

**At most once.** A worker killed between 2 and 4 leaves the mark *sending*: the message may
have gone. The sweep turns a mark older than the send lease into *uncertain* and never sends it
again; the notification itself is in the inbox either way, and a wait that goes on unanswered
gets its follow-up reminder. Sending it again could tell the person twice, and a second mail
cannot be taken back; a missed one is made good by the inbox and the reminder. (The customer's
mail in ``reconciliation.apply`` makes the same choice, and asks a person to confirm.) An SMTP
error other than a refusal (a timeout or a dropped connection after the message began) is the
same uncertainty, and is treated the same way.

Daily digests (:func:`digests_dispatch_due`, :func:`digest_send`): a person who chose one gets
the notifications of the day in one mail at ``NOTIFICATION_DIGEST_HOUR``; the same marks and
the same rule apply to each notification it carries.
"""

from __future__ import annotations

import datetime as dt
import logging
import smtplib
from collections.abc import Callable

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.utils import timezone

from cases import scheduling, validation
from cases.backoff import next_retry_at
from cases.inbox import next_digest_at
from cases.models import Notification, NotificationPreference
from cases.notify import case_path

logger = logging.getLogger(__name__)

DELIVER_TASK = "cases.tasks.deliver_notification"
DIGEST_TASK = "cases.tasks.send_digest"
Email = Notification.Email


def send_lease() -> dt.timedelta:
    return dt.timedelta(seconds=settings.NOTIFICATION_SEND_LEASE_SECONDS)


def refusal(exc: BaseException) -> bool:
    """The mail server answered and refused: nothing was accepted, so trying again later is
    safe. Anything else once the message began (a timeout, a dropped connection) may have
    delivered it."""
    return isinstance(exc, (smtplib.SMTPResponseException, smtplib.SMTPRecipientsRefused))


# --- the sweep's part ------------------------------------------------------------------------


def notifications_mark_uncertain(*, now: dt.datetime | None = None) -> int:
    """Sends begun longer than the send lease ago whose worker never marked an outcome: the
    worker stopped mid-send. They may have gone, so they are not sent again (at most once)."""
    now = now or timezone.now()
    return Notification.objects.filter(
        email_state=Email.SENDING, email_sending_at__lt=now - send_lease()
    ).update(
        email_state=Email.UNCERTAIN,
        email_due_at=None,
        email_last_error="The worker sending it stopped mid-send: it may have gone, so it is "
        "not sent again",
    )


def notifications_dispatch_due(
    *,
    now: dt.datetime | None = None,
    limit: int = 100,
    run: Callable[[str, int], None] | None = None,
) -> int:
    """Hand out the mail that is due, once per due time; returns how many were handed out.
    ``run(func_path, id)`` replaces the django-q2 enqueue (``run_worker`` runs it itself)."""
    now = now or timezone.now()
    notifications_mark_uncertain(now=now)
    due = (
        Notification.objects.filter(email_state=Email.PENDING, email_due_at__lte=now)
        .order_by("email_due_at")
        .values_list("pk", "email_due_at")[:limit]
    )
    picked = [
        pk
        for pk, due_at in list(due)
        # Compare-and-set: only the sweep that moves this due time hands it out.
        if Notification.objects.filter(
            pk=pk, email_state=Email.PENDING, email_due_at=due_at
        ).update(email_due_at=now + send_lease())
    ]
    for pk in picked:
        (run or scheduling.enqueue)(DELIVER_TASK, pk)
    return len(picked)


def digests_dispatch_due(
    *,
    now: dt.datetime | None = None,
    limit: int = 50,
    run: Callable[[str, int], None] | None = None,
) -> int:
    """Hand out the daily digests that are due (a compare-and-set on each person's next
    digest time moves it to the next day); returns how many were handed out."""
    now = now or timezone.now()
    due = (
        NotificationPreference.objects.filter(digest=True, digest_next_at__lte=now)
        .order_by("digest_next_at")
        .values_list("user_id", "digest_next_at")[:limit]
    )
    picked = [
        user_id
        for user_id, due_at in list(due)
        if NotificationPreference.objects.filter(
            user_id=user_id, digest=True, digest_next_at=due_at
        ).update(digest_next_at=next_digest_at(now))
    ]
    for user_id in picked:
        (run or scheduling.enqueue)(DIGEST_TASK, user_id)
    return len(picked)


# --- one delivery --------------------------------------------------------------------------


def _absolute(path: str) -> str:
    return f"{settings.HOLDFAST_BASE_URL}{path}"


def _message(notification: Notification) -> EmailMessage:
    case = notification.case
    key = f"notification-{notification.pk}"
    domain = settings.DEFAULT_FROM_EMAIL.rpartition("@")[2].strip("> ") or "holdfast.invalid"
    page = _absolute(case_path(case))
    where = f"Open {case.reference}: {page}\n"
    if notification.link != case_path(case):
        where = f"Decide it here: {_absolute(notification.link)}\nThe case page: {page}\n"
    body = (
        f"{_sentence(notification.text)}\n\n{where}\n"
        f"Your inbox: {_absolute('/admin/cases/notification/')}\n"
        "(You get this because Holdfast needs you on this case. Choose which mails you get, "
        "or a daily digest, from your inbox.)\n"
    )
    return EmailMessage(
        subject=_subject(notification.text),
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[notification.recipient.email],
        headers={"Message-ID": f"<{key}@{domain}>", "X-Holdfast-Notification": key},
    )


SUBJECT_MAX_LENGTH = 200


def _sentence(text: str) -> str:
    """``text`` ended with one full stop (a text that ends one already, with ``.)`` or cut
    with "…", gets none)."""
    return text if text.endswith((".", "!", "?", ".)", "…")) else f"{text}."


def _subject(text: str) -> str:
    """The mail's subject: the notification's text, cut at a word with "…" when it is longer
    than a subject line should be (cut mid-word before)."""
    return validation.cut_at_word(f"[Holdfast] {text}", SUBJECT_MAX_LENGTH)


def notification_deliver(notification_id: int) -> str:
    """Send one handed-out notification's mail at most once (see the module's rule); returns
    the outcome. Safe to run twice: only the worker whose mark takes it sends."""
    found = (
        Notification.objects.filter(pk=notification_id).select_related("case", "recipient").first()
    )
    if found is None or found.email_state != Email.PENDING:
        return "skipped"
    handed_out = found.email_due_at
    connection = get_connection(fail_silently=False)
    try:
        connection.open()
    except Exception as exc:  # noqa: BLE001 - nothing was sent: any failure is retried
        return _not_sent(found, exc, expected=Email.PENDING, due_at=handed_out)
    try:
        sending_at = timezone.now()
        # Recorded before the send: a worker that dies after it is recognisable afterwards,
        # and its mail is never sent twice.
        if not Notification.objects.filter(
            pk=found.pk, email_state=Email.PENDING, email_due_at=handed_out
        ).update(email_state=Email.SENDING, email_sending_at=sending_at):
            return "skipped: taken by another worker"
        try:
            connection.send_messages([_message(found)])
        except Exception as exc:  # noqa: BLE001 - classified below
            if refusal(exc):
                return _not_sent(found, exc, expected=Email.SENDING, sending_at=sending_at)
            Notification.objects.filter(pk=found.pk, email_sending_at=sending_at).update(
                email_state=Email.UNCERTAIN,
                email_due_at=None,
                email_last_error=f"It may have gone ({type(exc).__name__}: {exc})"[:300],
            )
            return "uncertain: not sent again"
        # Sent; also when the sweep already called it uncertain (this worker was only slow).
        Notification.objects.filter(
            pk=found.pk,
            email_state__in=[Email.SENDING, Email.UNCERTAIN],
            email_sending_at=sending_at,
        ).update(
            email_state=Email.SENT,
            email_sent_at=timezone.now(),
            email_due_at=None,
            email_last_error="",
        )
        return "sent"
    finally:
        connection.close()


def _not_sent(
    notification: Notification,
    exc: BaseException,
    *,
    expected: str,
    due_at: dt.datetime | None = None,
    sending_at: dt.datetime | None = None,
) -> str:
    """The mail did not go: try again later on the backoff, or give up at the limit."""
    attempts = notification.email_attempts + 1
    error = f"{type(exc).__name__}: {exc}"[:300]
    gave_up = attempts >= settings.NOTIFICATION_EMAIL_ATTEMPT_LIMIT
    where = {"pk": notification.pk, "email_state": expected}
    if sending_at is not None:
        where["email_sending_at"] = sending_at
    if due_at is not None:
        where["email_due_at"] = due_at
    Notification.objects.filter(**where).update(
        email_state=Email.FAILED if gave_up else Email.PENDING,
        email_due_at=None if gave_up else next_retry_at(attempts),
        email_attempts=attempts,
        email_sending_at=None,
        email_last_error=error,
    )
    logger.warning("Notification %s not mailed (try %s): %s", notification.pk, attempts, error)
    return "failed: gave up" if gave_up else f"not sent: retry {attempts}"


# --- one digest ----------------------------------------------------------------------------


def digest_send(user_id: int) -> str:
    """Mail the person one digest of their notifications waiting for it, at most once each."""
    waiting = Notification.objects.filter(recipient_id=user_id, email_state=Email.DIGEST)
    rows = list(waiting.select_related("case", "recipient").order_by("created_at", "pk")[:200])
    if not rows:
        return "nothing to send"
    person = rows[0].recipient
    connection = get_connection(fail_silently=False)
    try:
        connection.open()
    except Exception as exc:  # noqa: BLE001 - nothing was sent: tried again at the next digest
        return f"not sent: {type(exc).__name__}"
    try:
        sending_at = timezone.now()
        with transaction.atomic():
            marked = Notification.objects.filter(
                pk__in=[n.pk for n in rows], email_state=Email.DIGEST
            ).update(email_state=Email.SENDING, email_sending_at=sending_at)
        if marked != len(rows):
            Notification.objects.filter(email_sending_at=sending_at, recipient_id=user_id).update(
                email_state=Email.DIGEST, email_sending_at=None
            )
            return "skipped: taken by another worker"
        lines = [f"- {n.text}: {_absolute(n.link)}" for n in rows]
        message = EmailMessage(
            subject=f"[Holdfast] Your daily digest: {len(rows)} notification(s)",
            body="\n".join(
                [
                    f"{len(rows)} notification(s) since your last digest:",
                    "",
                    *lines,
                    "",
                    f"Your inbox: {_absolute('/admin/cases/notification/')}",
                ]
            ),
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[person.email],
        )
        try:
            connection.send_messages([message])
        except Exception as exc:  # noqa: BLE001 - classified below
            state = Email.DIGEST if refusal(exc) else Email.UNCERTAIN
            Notification.objects.filter(
                recipient_id=user_id, email_sending_at=sending_at, email_state=Email.SENDING
            ).update(email_state=state, email_last_error=f"{type(exc).__name__}: {exc}"[:300])
            return "not sent: next digest" if state == Email.DIGEST else "uncertain"
        Notification.objects.filter(
            recipient_id=user_id,
            email_sending_at=sending_at,
            email_state__in=[Email.SENDING, Email.UNCERTAIN],
        ).update(email_state=Email.SENT, email_sent_at=timezone.now(), email_last_error="")
        return f"sent {len(rows)}"
    finally:
        connection.close()
