"""The drill runs moved from reconciliation to the lab with their table, rows and permission.

Run on the test database: the two migrations of the move (``reconciliation.0013`` and
``lab.0001``) are undone, a run and the lead's "view drill run" are written as they were
before, and the migrations applied again.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from lab.models import DrillRun

BEFORE = [("lab", None), ("reconciliation", "0012_inboundevent_account")]


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    ContentType.objects.clear_cache()
    return executor


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lab_type_first", [False, True], ids=["moved", "merged"])
def test_a_drill_run_and_the_leads_permission_survive_the_move_to_the_lab(lab_type_first):
    """``merged``: the lab's content type and permission exist already (a ``migrate`` created
    them before the move ran); the lead's grant moves onto the lab's permission."""
    executor = _migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE[1]).apps
    old_model = apps.get_model("reconciliation", "DrillRun")
    started = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC)
    old_model.objects.create(
        started_at=started, finished_at=started, passed=12, failed=1, results=[{"name": "x"}]
    )
    old_type, _ = ContentType.objects.get_or_create(app_label="reconciliation", model="drillrun")
    view, _ = Permission.objects.get_or_create(
        content_type=old_type, codename="view_drillrun", defaults={"name": "Can view drill run"}
    )
    lead, _ = Group.objects.get_or_create(name="lead")
    lead.permissions.add(view)
    if lab_type_first:
        lab_type = ContentType.objects.create(app_label="lab", model="drillrun")
        Permission.objects.create(
            content_type=lab_type, codename="view_drillrun", name="Can view drill run"
        )

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    run = DrillRun.objects.get()
    assert (run.passed, run.failed, run.results) == (12, 1, [{"name": "x"}])
    assert DrillRun._meta.db_table == "reconciliation_drillrun"
    assert not ContentType.objects.filter(app_label="reconciliation", model="drillrun").exists()
    drill_grants = lead.permissions.filter(content_type__model="drillrun")
    assert list(drill_grants.values_list("content_type__app_label", "codename")) == [
        ("lab", "view_drillrun")
    ]
