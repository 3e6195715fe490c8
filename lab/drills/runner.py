"""Run drill scenarios one after another, print progress, keep every result."""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.utils import timezone

from lab.drills import scenarios as drills
from lab.drills.deployment import (
    DrillPeople,
    OrderSystemControl,
    prepare_order_system,
    restore_order_owner,
)

PASS, FAIL, SKIP, NOT_IMPLEMENTED = "PASS", "FAIL", "SKIP", "NOT IMPLEMENTED"
CASE_TASKS = {
    "reconciliation.tasks.source_check",
    "reconciliation.tasks.prepare_proposal",
    "reconciliation.tasks.apply_case",
    "reconciliation.tasks.reconcile_case",
}


@dataclass
class ScenarioResult:
    name: str
    title: str
    expectation: str
    outcome: str
    seconds: float
    case: str = ""
    evidence: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return asdict(self)


@contextmanager
def drill_cases_driven_here(sandbox: set[str]):
    """Follow-up tasks of drill cases are not handed to the deployment's cluster: the drill
    drives them (the dispatcher skips sandbox orders for the same reason). Every other task
    is enqueued as usual."""
    from cases import scheduling
    from cases.models import Case

    original = scheduling.enqueue

    def enqueue(func: str, *args) -> None:
        if func in CASE_TASKS and Case.objects.filter(pk=args[0], order_id__in=sandbox).exists():
            return
        original(func, *args)

    scheduling.enqueue = enqueue
    try:
        yield
    finally:
        scheduling.enqueue = original


def run_drills(
    chosen: list[drills.Scenario],
    *,
    order_id: str | None = None,
    holdfast_url: str = "",
    progress: Callable[[str], None] = print,
) -> tuple[list[ScenarioResult], dict]:
    sandbox = list(settings.ORDER_SYSTEM_SANDBOX_ORDERS)
    if not sandbox:
        raise drills.CheckFailed("No sandbox order (ORDER_SYSTEM_SANDBOX_ORDERS) to drill on.")
    order_id = order_id or sandbox[0]
    if order_id not in sandbox:
        raise drills.CheckFailed(f"{order_id} is not a sandbox order ({', '.join(sandbox)}).")
    run_id = timezone.now().strftime("%Y%m%d%H%M%S%f")
    control = OrderSystemControl()
    results: list[ScenarioResult] = []
    meta = {
        "run_id": run_id,
        "order_system": control.base_url,
        "sandbox_order": order_id,
        "holdfast_url": holdfast_url,
        "started_at": timezone.now().isoformat(),
    }
    try:
        control.check()
        control.clear_faults()
        before = prepare_order_system(control, order_id)
        people = DrillPeople()
        from reconciliation.selectors import current_autonomy

        autonomy = current_autonomy()
        meta["autonomy"] = str(autonomy.autonomy)
        if not autonomy.is_autonomous:
            progress(f"Warning: the order system is {autonomy.autonomy}: applies are refused.")
        total = len(chosen)
        with drill_cases_driven_here(set(sandbox)):
            for number, item in enumerate(chosen, 1):
                progress(f"[{number}/{total}] {item.name}: {item.title} …")
                result = _run_one(item, control, people, order_id, run_id, number, holdfast_url)
                results.append(result)
                where = f" ({result.case})" if result.case else ""
                progress(
                    f"[{number}/{total}] {item.name}: {result.outcome}{where} in "
                    f"{result.seconds:.1f} s"
                )
                if result.outcome == FAIL:
                    progress(f"    {result.evidence[-1] if result.evidence else ''}")
        control.clear_faults()
        restore_order_owner(control, order_id, before)
    finally:
        control.close()
    meta["finished_at"] = timezone.now().isoformat()
    return results, meta


def _run_one(item, control, people, order_id, run_id, number, holdfast_url) -> ScenarioResult:
    drill = drills.Drill(
        control=control,
        people=people,
        order_id=order_id,
        run_id=run_id,
        index=number,
        name=item.name,
        holdfast_url=holdfast_url,
    )
    started = time.monotonic()
    try:
        control.clear_faults()
        item.run(drill)
        outcome = PASS
    except drills.Skip as why:
        outcome = SKIP
        drill.note(f"skipped: {why}")
    except drills.NotImplementedDrill as why:
        outcome = NOT_IMPLEMENTED
        drill.note(f"not implemented: {why}")
    except drills.CheckFailed:
        outcome = FAIL
    except Exception as exc:  # noqa: BLE001 - a broken drill is a failed drill, reported
        outcome = FAIL
        drill.note(f"FAILED with {type(exc).__name__}: {exc}")
        drill.note(traceback.format_exc(limit=6))
    finally:
        outputs = [f"worker pid {w.pid}: {w.output().strip()[-600:]}" for w in drill.workers]
        drill.finish()
        with contextlib.suppress(Exception):  # the next scenario clears them again
            control.clear_faults()
    if outcome == FAIL:
        drill.evidence.extend(outputs)
        # The failing check last, where progress shows it.
        failed = [e for e in drill.evidence if e.startswith("FAILED")]
        if failed:
            drill.evidence.append(failed[-1])
    return ScenarioResult(
        name=item.name,
        title=item.title,
        expectation=item.expectation,
        outcome=outcome,
        seconds=round(time.monotonic() - started, 2),
        case=drill.current_case.reference if drill.current_case else "",
        evidence=drill.evidence,
    )
