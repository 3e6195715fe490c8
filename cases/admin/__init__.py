"""The support desk: find a case, see why it waits and who must answer, act through services.

Every queryset is scoped to the user's teams (``cases.selectors``); every button calls a
service; nothing is hard-deleted from here. This package holds no business rule and imports
nothing of the apps built on the kernel: they add their inlines, forms, page context, the
revoker behind "Delete" and account actions through :func:`case_admin_extend` (``extend``).

- ``site``: the site's words; ``case``: the case page and the audit trail; ``views``: the case
  page's panel and the views behind its buttons; ``forms``, ``filters``, ``inlines``;
  ``accounts``: customer accounts; ``staff``: teams and absences; ``queues``: the work queues;
``inbox``: each person's notifications and email settings, and the follow-up policies;
``saved_views``: the case list's saved views and bulk reassignment.
"""

from __future__ import annotations

from cases.admin import (  # noqa: F401 - registers the admins
    accounts,
    case,
    inbox,
    queues,
    saved_views,
    site,
    staff,
)
from cases.admin.case import CaseAdmin
from cases.admin.extend import CaseForm, CaseRevoker, case_admin_extend
from cases.admin.inlines import ReadOnlyInline
from cases.admin.views import change_url, person, timeline_url

__all__ = [
    "CaseAdmin",
    "CaseForm",
    "CaseRevoker",
    "ReadOnlyInline",
    "case_admin_extend",
    "change_url",
    "timeline_url",
    "person",
]
