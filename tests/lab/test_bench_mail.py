"""``make bench``'s mail server: the customers of a run's cases are told over real SMTP, and the
run checks that each was told exactly once, by the notification's key."""

from __future__ import annotations

import pytest
from django.core.mail import EmailMessage, get_connection

from lab.bench.mailsink import MailSink
from lab.bench.series import Skip


@pytest.fixture
def sink():
    server = MailSink().start()
    yield server
    server.stop()


def _tell(sink: MailSink, *keys: str) -> None:
    env = sink.env()
    connection = get_connection(
        env["EMAIL_BACKEND"], host=env["EMAIL_HOST"], port=int(env["EMAIL_PORT"])
    )
    connection.send_messages(
        [
            EmailMessage(
                "done", "done", to=["c@bench.example"], headers={"X-Holdfast-Notification-Key": key}
            )
            for key in keys
        ]
    )


def test_each_key_told_once_passes(sink):
    _tell(sink, "DATE-1-1:notify", "ADDR-2-1:notify")
    sink.told_once(["DATE-1-1:notify", "ADDR-2-1:notify"])


def test_a_customer_told_twice_or_never_fails_the_run(sink):
    _tell(sink, "DATE-1-1:notify", "DATE-1-1:notify")
    with pytest.raises(Skip, match="2 customers not told exactly once") as refused:
        sink.told_once(["DATE-1-1:notify", "ADDR-2-1:notify"])
    assert "'DATE-1-1:notify': 2" in str(refused.value)
    assert "'ADDR-2-1:notify': 0" in str(refused.value)
