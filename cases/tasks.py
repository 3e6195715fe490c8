"""django-q2 entry points for the kernel's background work: ids in, one service call.

Each is safe to run twice: it re-reads the row and acts only through a compare-and-set.
"""

from __future__ import annotations

from cases.delivery import digest_send, notification_deliver


def deliver_notification(notification_id: int) -> str:
    return notification_deliver(notification_id)


def send_digest(user_id: int) -> str:
    return digest_send(user_id)
