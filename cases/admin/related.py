"""Read-only relations link to the related object's page only for who may open it.

Django's admin links every read-only foreign key to the related object's change page, without
asking whether the viewer may see it: an agent's case page linked its owner, backup and team
to pages that answer a bare "403 Forbidden". A model admin with :class:`RelationsAsTheyMayOpen`
names those relations (``plain_relations``); for a viewer who may not view the related model,
each is shown as text instead (its ``<name>_as_text`` display).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


def as_text(name: str, description: str) -> Any:
    """A read-only display of relation ``name`` as its text, for ``<name>_as_text``."""

    @admin.display(description=description)
    def show(self: Any, obj: Any) -> str:
        value = getattr(obj, name)
        return "—" if value is None else str(value)

    show.__name__ = f"{name}_as_text"
    return show


class RelationsAsTheyMayOpen:
    """See the module. ``plain_relations``: the read-only relations to check."""

    plain_relations: tuple[str, ...] = ()

    def _hidden_relations(self, request: HttpRequest, obj: Any) -> set[str]:
        """The relations shown read-only to this viewer whose model they may not view (an
        editable relation stays a choice: only its link was ever the problem). An add page
        links nothing: none."""
        if obj is None:
            return set()
        model_admin: Any = self
        editable = model_admin.has_change_permission(request, obj)
        readonly = set(model_admin.readonly_fields)
        hidden = set()
        for name in self.plain_relations:
            if editable and name not in readonly:
                continue
            related = model_admin.model._meta.get_field(name).related_model
            target = model_admin.admin_site._registry.get(related)  # noqa: SLF001
            if target is None or not target.has_view_permission(request):
                hidden.add(name)
        return hidden

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fieldsets_shown(request, obj, super().get_fieldsets(request, obj))  # type: ignore[misc]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_shown(request, obj, super().get_readonly_fields(request, obj))  # type: ignore[misc]

    def fieldsets_shown(self, request: HttpRequest, obj: Any, fieldsets: Any) -> Any:
        """``fieldsets`` with each hidden relation as its text (for an admin that writes its
        own ``get_fieldsets``)."""
        hidden = self._hidden_relations(request, obj)
        if not hidden:
            return fieldsets
        shown = []
        for title, options in fieldsets:
            # A relation the form lists and the read-only fields list too is shown once.
            fields = list(dict.fromkeys(self._shown(f, hidden) for f in options["fields"]))
            shown.append((title, {**options, "fields": fields}))
        return shown

    def readonly_shown(self, request: HttpRequest, obj: Any, fields: Any) -> list[Any]:
        """``fields`` (read-only) with each hidden relation as its text (for an admin that
        writes its own ``get_readonly_fields``)."""
        hidden = self._hidden_relations(request, obj)
        fields = list(fields)
        return [self._shown(f, hidden) for f in fields] + [
            f"{name}_as_text" for name in sorted(hidden) if name not in fields
        ]

    @staticmethod
    def _shown(field: Any, hidden: set[str]) -> Any:
        return f"{field}_as_text" if isinstance(field, str) and field in hidden else field
