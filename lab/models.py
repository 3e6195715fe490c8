"""The lab's records: the runs of ``manage.py drill``.

``DrillRun`` was created by ``reconciliation`` (migration 0008) and moved here with its table
(``reconciliation_drillrun``) and rows kept: ``lab.0001`` takes it over in the migration state
only.
"""

from __future__ import annotations

from django.db import models


class DrillRun(models.Model):
    """One run of ``manage.py drill``: its results per scenario and where its report is.
    Only ``lab.drills.report`` writes these rows."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    order_system_url = models.CharField(max_length=300, blank=True)
    results = models.JSONField(default=list, help_text="One entry per scenario, with evidence.")
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    other = models.PositiveIntegerField(default=0, help_text="Skipped or not implemented.")
    json_path = models.CharField(max_length=500, blank=True)
    html_path = models.CharField(max_length=500, blank=True)

    class Meta:
        db_table = "reconciliation_drillrun"  # the table reconciliation created, kept with its rows
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"Drill {self.started_at:%Y-%m-%d %H:%M}: {self.passed} passed, {self.failed} failed"
