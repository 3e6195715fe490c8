"""System checks of reconciliation's own wiring (registered from ``ReconciliationConfig.ready``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from cases.checks import unresolvable_paths
from reconciliation.dispatch import TASK_FOR_STATUS


@register()
def every_dispatched_task_resolves(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """A task path the dispatcher enqueues must name a real function: a misspelt one fails only
    in a real worker (tests replace the enqueue), and the case then waits for nothing."""
    return [
        Error(f"The task {path!r} does not resolve to a function.", id="holdfast.E002")
        for path in unresolvable_paths(func for func, _kind in TASK_FOR_STATUS.values())
    ]
