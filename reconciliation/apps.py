from django.apps import AppConfig


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    verbose_name = "Reconciliation"

    def ready(self) -> None:
        from django_q.signals import post_spawn, pre_execute

        from reconciliation import (
            actions,  # noqa: F401 - registers its case actions
            checks,  # noqa: F401 - registers its system checks
            extensions,
        )
        from reconciliation.liveness import task_started
        from reconciliation.priority import give_way_on_spawn
        from reconciliation.sweep import start_sweeper_on_spawn

        post_spawn.connect(start_sweeper_on_spawn, dispatch_uid="holdfast-sweeper")
        # The workers give way to people on a shared host (``reconciliation.priority``).
        post_spawn.connect(give_way_on_spawn, dispatch_uid="holdfast-worker-priority")
        # Each task a worker starts is the cluster's beat (manage.py run_cluster's watchdog).
        pre_execute.connect(task_started, dispatch_uid="holdfast-cluster-beat")
        extensions.register()  # its panel on the admin home

        from cases.services import UNSENT_DECISION_CHECKS
        from reconciliation.restore_recovery import restore_check_before_unsent_decision

        if restore_check_before_unsent_decision not in UNSENT_DECISION_CHECKS:
            UNSENT_DECISION_CHECKS.append(restore_check_before_unsent_decision)
