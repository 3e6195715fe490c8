"""The case admin's extension point: approvals and reconciliation add their inlines, forms,
page context, the revoker behind "Delete" and the accounts' "Revoke access" through
``cases.admin.case_admin_extend``; the kernel's admin names none of them."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import RequestFactory

from cases.admin.extend import EXTENSIONS
from cases.models import Case, CustomerAccount

pytestmark = pytest.mark.django_db


def test_the_case_page_shows_the_apps_inlines_before_the_kernels(case, lead):
    request = RequestFactory().get("/")
    request.user = lead
    names = [inline.__name__ for inline in admin.site._registry[Case].get_inlines(request, case)]
    assert names == [
        "ProposalInline",
        "OperationInline",
        "AttemptInline",
        "CancellationInline",
        "EvidenceInline",
        "CaseEventInline",
    ]


def test_the_apps_register_their_forms_the_revoker_and_the_account_action():
    assert set(EXTENSIONS.forms) == {"prepare", "settle"}
    assert EXTENSIONS.revoker is not None
    account_admin = admin.site._registry[CustomerAccount]
    assert [a if isinstance(a, str) else a.__name__ for a in account_admin.actions] == [
        "verify",
        "revoke_access",
    ]
