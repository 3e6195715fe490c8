"""Admin building blocks shared by the apps."""

from __future__ import annotations

from django.contrib import admin


class ReadOnlyInline(admin.TabularInline):
    """History shown on a page: nothing is added, changed or deleted from an inline."""

    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
