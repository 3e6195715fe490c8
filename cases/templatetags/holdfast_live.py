"""The state a queue page was rendered with, for its live banner (see cases.live)."""

from __future__ import annotations

from django import template

from cases.live import queue_live_url, queue_state

register = template.Library()


@register.simple_tag(takes_context=True)
def live_queue(context, name: str) -> dict:
    """``{% live_queue "held" as live %}``: ``live.url``, ``live.digest`` and ``live.count``."""
    state = queue_state(context["request"].user, name)
    return {"url": queue_live_url(name), **state}
