"""Opening a case from the admin: choose the kind, the account and the order, see the order's
current value, give the kind's own fields and a note, and ``services.case_open`` does the rest.

One page in two steps. The choice (kind, account, order) is a GET form, so the page can be
linked to (the admin home, an account's page). With a valid choice the page reads the order's
current value through the order reader an app registered (``extend``: reconciliation's client)
and shows the kind's own form. That form carries its own request key, made when the page is
shown: a double submit or a browser retry sends the same key, and intake answers with the one
case it opened. Errors are shown beside their fields with everything typed kept; a request for
an order with an open case of the kind links to that case. This module decides nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from cases import kinds, selectors, services, validation
from cases.admin.extend import EXTENSIONS
from cases.admin.forms import BoundedCharField
from cases.admin.views import change_url, person
from cases.exceptions import CaseError, InvalidCaseInput, OpenCaseExists
from cases.models import Case, CustomerAccount

PREFIX = "change"


class ChooseForm(forms.Form):
    """What the case is about: a kind of change, an account of the person's teams, an order."""

    kind = forms.ChoiceField(label="Kind of change", widget=forms.RadioSelect)
    account = forms.ModelChoiceField(queryset=CustomerAccount.objects.none(), label="Account")
    order_id = BoundedCharField(
        label="Order",
        max_length=validation.IDENTIFIER_MAX_LENGTH,
        validators=[validation.IdentifierValidator()],
        help_text="The order's id in the order system, e.g. ORD-7731.",
    )

    def __init__(self, *args: Any, accounts: QuerySet[CustomerAccount], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kind_field = self.fields["kind"]
        assert isinstance(kind_field, forms.ChoiceField)  # noqa: S101 - declared above
        kind_field.choices = kinds.choices()
        account_field = self.fields["account"]
        assert isinstance(account_field, forms.ModelChoiceField)  # noqa: S101 - declared above
        account_field.queryset = accounts


class RequestFields(forms.Form):
    """The intake's own fields beside the kind's: the request key (made when the page is
    shown, hidden) and the customer's note."""

    request_key = forms.CharField(widget=forms.HiddenInput, max_length=100)
    note = BoundedCharField(
        label="Note",
        required=False,
        max_length=validation.NOTE_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the customer asked, in their words (the approver reads it).",
        validators=[validation.TextValidator(validation.NOTE_MAX_LENGTH)],
    )


def request_form(kind: kinds.ChangeKind, data: Any = None) -> forms.Form:
    """The kind's own form with the request's fields; a fresh request key when unbound."""
    form_class = type(f"Open{type(kind).__name__}Form", (RequestFields, kind.form), {})
    return form_class(data, prefix=PREFIX, initial={"request_key": f"admin-{uuid.uuid4()}"})


def may_open(request: HttpRequest) -> bool:
    return services.actor_may_open_cases(person(request))


def intake_url(*, account: CustomerAccount | None = None, kind: str = "") -> str:
    """The intake page, the account or the kind preselected."""
    query = "&".join(
        part
        for part in (f"account={account.pk}" if account else "", f"kind={kind}" if kind else "")
        if part
    )
    return reverse("admin:cases_case_intake") + (f"?{query}" if query else "")


def intake_view(model_admin: ModelAdmin[Case], request: HttpRequest) -> HttpResponse:
    """The intake page (GET: choose, then see the order and the kind's form; POST: open)."""
    if not may_open(request):
        raise PermissionDenied
    accounts = selectors.accounts_for(request.user)
    # A link may preselect the kind or the account; the order makes it a choice to check.
    chosen = "order_id" in request.GET
    initial = {name: request.GET.get(name) for name in ("kind", "account")}
    choice = (
        ChooseForm(request.GET, accounts=accounts)
        if chosen
        else ChooseForm(initial=initial, accounts=accounts)
    )
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": "Open a case",
        "choose": choice,
        "opts": model_admin.model._meta,
    }
    if chosen and choice.is_valid():
        kind = kinds.get(choice.cleaned_data["kind"])
        form = request_form(kind, request.POST or None)
        if request.method == "POST" and form.is_valid():
            opened = _open(request, kind, choice.cleaned_data, form)
            if opened is not None:
                return opened
        context.update(_order_now(kind, choice.cleaned_data), kind=kind, form=form)
    return TemplateResponse(request, "admin/cases/case/intake.html", context)


def _order_now(kind: kinds.ChangeKind, chosen: dict[str, Any]) -> dict[str, Any]:
    """The order's current value in the kind's words, or why it cannot be shown. An order of
    another account is never described (it may be another team's customer), nor told apart
    from an order the order system does not have."""
    reader = EXTENSIONS.order_reader
    if reader is None:
        return {"order_problem": "The order system is not connected to this page."}
    order, problem = reader(chosen["order_id"])
    account = chosen["account"].reference
    if order is None and problem:
        return {"order_problem": problem}
    if order is None or order.account_id != account:
        # No such order, or another account's: the same words (``not_the_accounts_order``).
        words = validation.not_the_accounts_order(chosen["order_id"], account)
        return {"order_problem": f"{words}: a case for it would go to a person at once."}
    words = kind.describe_seen(kind.seen(order))
    if order.status != "open":
        words += f"; the order is {order.status}, not open (the order system refuses changes)"
    return {"order_now": words, "order_version": order.version}


def _open(
    request: HttpRequest, kind: kinds.ChangeKind, chosen: dict[str, Any], form: forms.Form
) -> HttpResponse | None:
    """Open the case; the redirect to it, or None with the refusal on the form."""
    data = form.cleaned_data
    try:
        case, created = services.case_open(
            actor=person(request),
            account=chosen["account"],
            request_key=data["request_key"],
            order_id=chosen["order_id"],
            kind=kind.code,
            change=kind.from_form(data),
            note=data["note"],
        )
    except OpenCaseExists as exc:
        link = format_html('<a href="{}">{}</a>', _case_url(exc.reference), exc.reference)
        form.add_error(None, format_html("{} Open {}.", exc.detail, link))
        return None
    except InvalidCaseInput as exc:
        _errors_beside_fields(form, exc)
        return None
    except CaseError as exc:
        form.add_error(None, exc.detail)
        return None
    if created:
        messages.success(
            request, f"{case.reference} opened: {case.change_description}. It reads the order next."
        )
    else:
        messages.info(request, f"This request already opened {case.reference}: nothing new.")
    return HttpResponseRedirect(change_url(case))


def _case_url(reference: str) -> str:
    case = Case.objects.filter(reference=reference).only("pk").first()
    return change_url(case) if case is not None else reverse("admin:cases_case_changelist")


def _errors_beside_fields(form: forms.Form, exc: InvalidCaseInput) -> None:
    """The service's messages beside the form's fields (``change.address.country`` is the
    kind form's ``country``); the rest above the form."""
    for name, problems in exc.fields.items():
        field = name.rsplit(".", 1)[-1]
        if field in form.fields:
            form.add_error(field, problems)
        else:
            form.add_error(None, [f"{name.replace('_', ' ')}: {p}" for p in problems])
