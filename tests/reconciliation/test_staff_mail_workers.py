"""Staff mail as a new user meets it: real worker processes (``manage.py qcluster`` and
``manage.py run_worker``), the reference order system and a real SMTP server.

- an approver receives the mail within a minute of a proposal awaiting them, and its link
  opens the decision page;
- an owner away: the held case's mail goes to the named backup;
- a worker SIGKILLed in the middle of a delivery neither loses nor doubles a mail (counted at
  the server): the message in flight had arrived, and is not sent again.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter

import pytest
from django.db import transaction
from django.utils import timezone

from cases.kernel import SYSTEM, apply_transition, lock_case
from cases.models import Case, CaseEvent, Notification, Status
from cases.services import staff_set_away
from tests.support.order_system import DEFAULT_GRANT_KEY
from tests.support.proc_worker import Proc, wait_for

pytestmark = [
    pytest.mark.order_system,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]


def _env(live_orders, smtp, tmp_path, **extra: str) -> dict[str, str]:
    return {
        "ORDER_SYSTEM_URL": live_orders.base_url,
        "APPROVAL_GRANT_KEY": DEFAULT_GRANT_KEY,
        "HOLDFAST_STATE_DIR": str(tmp_path / "worker-state"),
        "HOLDFAST_BASE_URL": "https://desk.example",
        "APPLY_LEASE_SECONDS": "3",
        "APPLY_HEARTBEAT_SECONDS": "0.5",
        **smtp.env(),
        **extra,
    }


def test_an_approver_receives_the_mail_within_a_minute_and_opens_the_decision_page(
    make_case, approver, agent, live_orders, smtp, tmp_path, client
):
    with Proc("qcluster", env=_env(live_orders, smtp, tmp_path)) as cluster:
        case = make_case()  # verified: the workers read the order and prepare a proposal
        [mail] = smtp.wait_for(1, timeout=90)
        arrived = timezone.now()
        assert Case.objects.get(pk=case.pk).status == Status.AWAITING_REVIEW, cluster.output()
    awaiting = CaseEvent.objects.get(case=case, to_status=Status.AWAITING_REVIEW)
    waited = (arrived - awaiting.created_at).total_seconds()
    print(f"\nmail at the approver {waited:.1f} s after the proposal began to await review")
    assert waited < 60
    assert mail.envelope_to == [approver.email]
    assert case.reference in mail.subject
    link = re.search(r"https://desk\.example(/\S+)", mail.body)
    assert link is not None, mail.body
    client.force_login(approver)
    page = client.get(link.group(1))
    assert page.status_code == 200
    assert "Approve" in page.content.decode()
    notification = Notification.objects.get(recipient=approver, case=case)
    assert notification.email_state == Notification.Email.SENT


def test_an_owner_away_hands_the_held_cases_mail_to_the_backup(
    approved_case, lead, backup, live_orders, smtp, tmp_path
):
    staff_set_away(user=lead, away_until=timezone.localdate(), actor=lead)
    case = approved_case()
    # The order system applies the change and the answer is lost: effect unknown, held. The
    # workers' one look cannot raise the fence, so their checks run out and the hold becomes
    # a person's (cases.held): the lead's, and the lead is away.
    live_orders.set_fault("drop_after_commit", path_prefix="/orders/ORD-7731/operations")
    live_orders.set_fault("unavailable", path_prefix="/orders/ORD-7731/fence", times=None)
    Case.objects.filter(pk=case.pk).update(next_check_at=timezone.now())
    env = _env(
        live_orders,
        smtp,
        tmp_path,
        ORDER_SYSTEM_READ_TIMEOUT="1",
        HOLD_FIRST_CHECK_SECONDS="0",
        RECONCILE_ATTEMPT_LIMIT="1",
    )
    with Proc("qcluster", env=env) as cluster:
        mail = wait_for(
            lambda: smtp.to(backup.email),
            timeout=90,
            what=lambda: f"the held case's mail to the backup\n{cluster.output()}",
        )
    assert Case.objects.get(pk=case.pk).status == Status.HELD
    assert "is held" in mail[0].subject
    assert smtp.to(lead.email) == []


def test_a_worker_killed_mid_delivery_loses_and_doubles_nothing(
    make_case, lead, live_orders, smtp, tmp_path
):
    cases = [make_case() for _ in range(5)]
    for case in cases:
        with transaction.atomic():
            apply_transition(lock_case(case.pk), "escalate", actor=SYSTEM, reason="stuck")
    ids = set(Notification.objects.values_list("pk", flat=True))
    assert len(ids) == 5
    # The third mail arrives in full at the server, which holds its answer: the worker is
    # killed while it waits for it.
    smtp.hold = lambda message: len(smtp.received) == 3
    env = _env(live_orders, smtp, tmp_path, NOTIFICATION_SEND_LEASE_SECONDS="3")
    with Proc("run_worker", env=env) as first:
        assert smtp.holding.wait(timeout=60), first.output()
        pids = [first.process.pid]
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(timeout=10)
    smtp.release.set()
    in_flight = Notification.objects.get(email_state=Notification.Email.SENDING)
    killed = time.monotonic()
    with Proc("run_worker", env=env) as second:
        wait_for(
            lambda: (
                not Notification.objects.filter(
                    email_state__in=[Notification.Email.PENDING, Notification.Email.SENDING]
                ).exists()
            ),
            timeout=60,
            what=lambda: f"the replacement worker to finish\n{second.output()}",
        )
        pids.append(second.process.pid)
    print(f"\nall settled {time.monotonic() - killed:.1f} s after the kill")
    arrived = Counter(r.message["X-Holdfast-Notification"] for r in smtp.received)
    # Counted at the server: every notification's mail arrived exactly once.
    assert arrived == Counter({f"notification-{pk}": 1 for pk in ids}), arrived
    states = dict(Notification.objects.values_list("pk", "email_state"))
    # The one in flight may have gone as far as the sender knows: it is not sent again.
    assert states.pop(in_flight.pk) == Notification.Email.UNCERTAIN
    assert set(states.values()) == {Notification.Email.SENT}
    assert len(set(pids)) == 2
