"""The admin site's words and home page: the support desk."""

from __future__ import annotations

from django.contrib import admin

admin.site.site_header = "Holdfast case desk"
admin.site.site_title = "Holdfast"
admin.site.index_title = "What needs a person now"
admin.site.index_template = "admin/holdfast_index.html"
