"""Stop points for drills: a worker asked by a drill stops itself (SIGSTOP) at a named point.

``drill_point(name)`` does nothing unless the process runs with ``HOLDFAST_DRILL=1`` and
``HOLDFAST_DRILL_STOP_AT`` names this point, and never in production. Only the drill runner sets
those variables, on the worker processes it starts; the drill resumes them with SIGCONT or kills
them. Points: ``after_claim`` (claimed, nothing sent yet) and ``after_submit`` (the order
system answered, the answer not saved yet).

The apply step only names its points (``reconciliation.apply.STEP_POINT_OBSERVERS``) and knows
nothing of drills; ``ReconciliationConfig.ready`` registers ``drill_point`` there.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings

POINTS = ("after_claim", "after_submit")


def drill_point(name: str) -> None:
    if os.environ.get("HOLDFAST_DRILL") != "1" or getattr(settings, "PRODUCTION", False):
        return
    if name in os.environ.get("HOLDFAST_DRILL_STOP_AT", "").split(","):
        print(f"drill: stopping at {name}", flush=True)  # noqa: T201 - the drill reads it
        os.kill(os.getpid(), signal.SIGSTOP)
