"""Stop points for drills: a worker asked by a drill stops itself (SIGSTOP) at a named point.

Only a drill worker registers ``drill_point``: ``LabConfig.ready`` calls ``register()``, which
adds it to ``reconciliation.apply.STEP_POINT_OBSERVERS`` only in a process started with
``HOLDFAST_DRILL=1`` and never under ``DJANGO_ENV=production``; every other process (the
product's workers, the web processes) has no observer at all. Only the drill runner sets those
variables, on the worker processes it starts; the drill resumes them with SIGCONT or kills them.

``drill_point(name)`` stops the process when ``HOLDFAST_DRILL_STOP_AT`` names this point.
Points: ``after_claim`` (claimed, nothing sent yet) and ``after_submit`` (the order system
answered, the answer not saved yet). The apply step only names its points and knows nothing of
drills.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings

POINTS = ("after_claim", "after_submit")


def asked() -> bool:
    """This process is a drill worker: started with ``HOLDFAST_DRILL=1``, never in production."""
    return os.environ.get("HOLDFAST_DRILL") == "1" and not getattr(settings, "PRODUCTION", False)


def register() -> bool:
    """Add ``drill_point`` to the apply step's observers when this process is a drill worker
    (idempotent); say whether it is registered."""
    if not asked():
        return False
    from reconciliation.apply import STEP_POINT_OBSERVERS

    if drill_point not in STEP_POINT_OBSERVERS:
        STEP_POINT_OBSERVERS.append(drill_point)
    return True


def drill_point(name: str) -> None:
    if not asked():
        return
    if name in os.environ.get("HOLDFAST_DRILL_STOP_AT", "").split(","):
        print(f"drill: stopping at {name}", flush=True)  # noqa: T201 - the drill reads it
        os.kill(os.getpid(), signal.SIGSTOP)
