"""``{% for row in inline_admin_formset|history_rows %}``: a read-only inline's rows, each field
as the admin renders a read-only field, without a form per row (``cases.admin.inlines``). Used by
``templates/admin/edit_inline/history_table.html``."""

from __future__ import annotations

from django import template

from cases.admin.inlines import history_rows as rows_of

register = template.Library()


@register.filter
def history_rows(admin_formset):
    return rows_of(admin_formset)
