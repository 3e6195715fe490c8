"""``manage.py drill``: run the seed's failure exercises against this deployment.

Needs a running order system with fault injection enabled (``ORDERS_FAULTS_ENABLED=1``, never
in production) at ``ORDER_SYSTEM_URL``; drill cases live on a sandbox order
(``ORDER_SYSTEM_SANDBOX_ORDERS``) of the drill account, never on a customer's order. Prints one
line per scenario as it starts and ends, writes ``var/drills/drill-<time>.json`` and ``.html``
and a Drills row in the admin, and exits 1 if any scenario failed.

``--task source_check --case D-41`` is the drill's own worker process for one stage (the
drill starts it, stops it and kills it); it is not meant to be run by hand.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

TASKS = {
    "source_check": "reconciliation.tasks.source_check",
    "prepare_proposal": "reconciliation.tasks.prepare_proposal",
}


class Command(BaseCommand):
    help = "Run failure drills against this deployment's order system (fault injection on)."

    def add_arguments(self, parser):
        parser.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
        parser.add_argument("--fast", action="store_true", help="only the quick scenarios")
        parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
        parser.add_argument("--order", help="the sandbox order to drill on (default: the first)")
        parser.add_argument(
            "--holdfast-url", default="", help="deliver webhooks over HTTP to this Holdfast"
        )
        parser.add_argument("--report-dir", help="where the reports go (default var/drills)")
        parser.add_argument("--task", choices=sorted(TASKS), help=""" (a drill worker)""")
        parser.add_argument("--case", help="(a drill worker) the case reference")

    def handle(self, *args, scenarios=(), **options):
        if options["task"]:
            return self._task(options["task"], options["case"])
        if getattr(settings, "PRODUCTION", False):
            raise CommandError("Drills inject faults: they refuse DJANGO_ENV=production.")
        from lab.drills.deployment import DeploymentError
        from lab.drills.report import write_report
        from lab.drills.runner import FAIL, run_drills
        from lab.drills.scenarios import lookup

        if options["list"]:
            for item in lookup(None):
                self.stdout.write(f"{item.name}{' (fast)' if item.fast else ''}: {item.title}")
            return
        try:
            chosen = lookup(list(scenarios), fast=options["fast"])
        except KeyError as unknown:
            raise CommandError(f"Unknown scenario: {unknown}") from None
        self.stdout.write(
            f"Drilling {len(chosen)} scenario(s) against {settings.ORDER_SYSTEM_URL}", ending="\n"
        )

        def progress(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            results, meta = run_drills(
                chosen,
                order_id=options["order"],
                holdfast_url=options["holdfast_url"],
                progress=progress,
            )
        except DeploymentError as exc:
            raise CommandError(str(exc)) from None
        directory = Path(options["report_dir"]) if options["report_dir"] else None
        run, json_path, html_path = write_report(results, meta, directory=directory)
        self.stdout.write(
            f"{run.passed} passed, {run.failed} failed, {run.other} skipped or not implemented"
        )
        self.stdout.write(f"Report: {html_path} (JSON: {json_path}); admin: Drill runs")
        if any(r.outcome == FAIL for r in results):
            raise SystemExit(1)

    def _task(self, task: str, reference: str | None) -> None:
        from django.utils.module_loading import import_string

        from cases.models import Case

        if not reference:
            raise CommandError("--task needs --case.")
        case = Case.objects.filter(reference=reference).first()
        if case is None or case.order_id not in settings.ORDER_SYSTEM_SANDBOX_ORDERS:
            raise CommandError(f"{reference} is not a drill case.")
        from lab.drills.runner import drill_cases_driven_here

        # Its follow-up work (a source check's proposal) is the drill's to drive, as in the
        # drill's own process: handed to the deployment's cluster, it raced the drill's step.
        with drill_cases_driven_here(set(settings.ORDER_SYSTEM_SANDBOX_ORDERS)):
            self.stdout.write(f"{reference}: {import_string(TASKS[task])(case.pk)}")
