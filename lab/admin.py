"""Admin for the drill runs ("Drill runs"): read-only rows of ``manage.py drill``, each with
its HTML report."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from lab.models import DrillRun


@admin.register(DrillRun)
class DrillRunAdmin(admin.ModelAdmin):
    """Read-only: runs are written by ``manage.py drill``; the report opens from here."""

    list_display = ("started_at", "passed", "failed", "other", "seconds", "report_link")
    list_display_links = ("started_at",)
    change_form_template = "admin/lab/drillrun/change_form.html"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="Seconds")
    def seconds(self, obj: DrillRun) -> str:
        return f"{(obj.finished_at - obj.started_at).total_seconds():.0f}"

    @admin.display(description="Report")
    def report_link(self, obj: DrillRun):
        url = reverse("admin:lab_drillrun_report", args=[obj.pk])
        return format_html('<a href="{}">HTML report</a>', url)

    def get_urls(self):
        report = self.admin_site.admin_view(self.report_view)
        return [
            path("<int:pk>/report/", report, name="lab_drillrun_report"),
            *super().get_urls(),
        ]

    def report_view(self, request, pk: int):
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = get_object_or_404(DrillRun, pk=pk)
        if not run.results:
            raise Http404("No results.")
        context = {
            **self.admin_site.each_context(request),
            "run": run,
            "results": run.results,
            "passed": run.passed,
            "failed": run.failed,
            "other": run.other,
            "started_at": run.started_at,
            "order_system": run.order_system_url,
            "in_admin": True,
        }
        return TemplateResponse(request, "admin/lab/drillrun/report.html", context)
