"""Every task path Holdfast enqueues or schedules resolves to a real function.

Tests that replace the enqueue function never import the task, so a misspelt path (it once
named ``cases.tasks.apply_case``, which does not exist) would only fail in a real worker.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from django.utils.module_loading import import_string

ROOT = Path(__file__).resolve().parent.parent
APPS = ("cases", "approvals", "reconciliation", "config", "lab")
_PATH = re.compile(r"""["']((?:cases|approvals|reconciliation|lab\.bench)\.tasks\w*\.\w+)["']""")


def _paths_in_source() -> set[str]:
    found = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue  # history: a migration may name a task that has since moved
            found.update(_PATH.findall(path.read_text()))
    return found


def test_the_scan_finds_the_known_task_paths():
    paths = _paths_in_source()
    assert "reconciliation.tasks.apply_case" in paths
    assert "reconciliation.tasks.prepare_proposal" in paths
    assert "lab.bench.tasks.noop" in paths  # the bench's own tasks, enqueued by path


@pytest.mark.parametrize("path", sorted(_paths_in_source()))
def test_task_path_resolves(path):
    module, _, name = path.rpartition(".")
    importlib.import_module(module)
    assert callable(import_string(path)), path


@pytest.mark.django_db
def test_every_schedule_names_a_real_task():
    from django_q.models import Schedule

    for func in Schedule.objects.values_list("func", flat=True):
        assert callable(import_string(func)), func


@pytest.mark.django_db
def test_the_system_checks_resolve_every_task_path():
    from django.core.management import call_command

    call_command("check", databases=["default"], fail_level="ERROR")


def test_the_system_check_reports_a_dispatched_task_that_does_not_exist(monkeypatch):
    from reconciliation import checks, dispatch

    monkeypatch.setitem(dispatch.TASK_FOR_STATUS, "ready", ("cases.tasks.apply_case", "apply"))

    errors = checks.every_dispatched_task_resolves(None)

    assert [e.id for e in errors] == ["holdfast.E002"]
    assert "cases.tasks.apply_case" in errors[0].msg


@pytest.mark.django_db
def test_the_system_check_reports_a_schedule_that_does_not_exist():
    from django_q.models import Schedule

    from cases import checks

    Schedule.objects.create(name="bogus", func="reconciliation.tasks.nothing_here")

    errors = checks.every_schedule_resolves(None, databases=["default"])

    assert [e.id for e in errors] == ["holdfast.E003"]
