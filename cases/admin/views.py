"""The case page's panel and the views behind its buttons and forms.

What is offered comes from ``cases.actions.case_actions(case, person)`` only; each button's view
looks the action object up and runs it with ``cases.actions.action_run``, which checks and calls
one service. These views render a confirm page and the outcome; they decide nothing.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from cases import selectors, services
from cases.actions import CaseAction, action_run, case_actions, get_action, who_may
from cases.admin.extend import EXTENSIONS, CaseForm
from cases.admin.forms import ActionForm, EvidenceForm, errors_in_words
from cases.case_story import event_sentence
from cases.exceptions import CaseError, VersionConflict
from cases.kernel import actor_may
from cases.models import Case, CaseEvent
from cases.next_action import describe_next_action


def person(request: HttpRequest) -> User:
    """The signed-in person: every view here is behind ``admin_site.admin_view``, which lets
    only an active staff user through (never an anonymous one)."""
    return cast(User, request.user)


def scoped_case(model_admin: ModelAdmin[Case], request: HttpRequest, pk: int) -> Case:
    """The case if it is within the person's teams (the admin's queryset); 404 otherwise."""
    return get_object_or_404(model_admin.get_queryset(request), pk=pk)


def change_url(case: Case) -> str:
    return reverse("admin:cases_case_change", args=[case.pk])


# The anchor of the case page's timeline (``admin/cases/case/change_form.html``).
TIMELINE_ANCHOR = "timeline"


def timeline_url(case: Case) -> str:
    """The case's history as people read it: the timeline on its page."""
    return f"{change_url(case)}#{TIMELINE_ANCHOR}"


def case_page_context(request: HttpRequest, case: Case) -> dict[str, Any]:
    """What the case page renders: the buttons and forms of the actions this person is offered
    now, the next-action text, and what the apps built on the kernel add (``extend``)."""
    with case.guards_read_once():  # the buttons and the next action's words ask the same
        return _case_page_context(request, case)


def _case_page_context(request: HttpRequest, case: Case) -> dict[str, Any]:
    actions = case_actions(case, request.user)
    offered_forms = {a.form for a in actions if a.form}
    buttons = [(action, _button(case, action)) for action in actions if not action.form]
    context: dict[str, Any] = {
        "next_action": describe_next_action(case, actor=request.user),
        "case_actions": [button for _, button in buttons],
        "case_transitions": [button for action, button in buttons if action.transition],
        "case": case,
        "live_url": reverse("live-case", args=[case.reference]),
        "same_order": selectors.open_cases_on_order(case, request.user),
    }
    for case_form in case_forms():
        context[f"{case_form.name}_form"] = (
            case_form.build(case) if case_form.name in offered_forms else None
        )
        context[f"{case_form.name}_url"] = reverse(
            f"admin:cases_case_{case_form.name}", args=[case.pk]
        )
    for contribute in EXTENSIONS.context:
        context.update(contribute(request, case))
    return context


def _button(case: Case, action: CaseAction) -> dict[str, Any]:
    url_name = "cases_case_transition" if action.transition else "cases_case_action"
    return {
        "name": action.name,
        "label": action.label_for(case),
        "url": reverse(f"admin:{url_name}", args=[case.pk, action.name]),
        # An action with a reason or a consequence to confirm opens its confirm page; the
        # others are a button that posts at once.
        "confirm": action.needs_reason or bool(action.confirm),
        "danger": action.danger,
    }


def _not_offered(case: Case, action: CaseAction, request: HttpRequest) -> str:
    """Why ``action`` is not offered to this person on ``case`` now, in words ('' if it is)."""
    if not actor_may(person(request), action.permission, case):
        return (
            f"{action.label_for(case)} is not offered to you on {case.reference}: "
            f"that is for {who_may(action)}."
        )
    if not action.available(case):
        return (
            f"{action.label_for(case)} is not possible now: {case.reference} is "
            f"{case.get_status_display().lower()}."
        )
    return ""


def action_view(
    model_admin: ModelAdmin[Case], request: HttpRequest, pk: int, name: str
) -> HttpResponse:
    """One case action: GET confirms what it will do (and asks why), POST runs it.

    Every action is checked and executed by ``cases.actions.action_run``; this view only
    renders its confirm page and the outcome.
    """
    action = get_action(name)
    if action is None or action.execute is None:
        raise Http404(f"No action {name!r}.")
    case = scoped_case(model_admin, request, pk)
    back = change_url(case)
    if request.method != "POST":
        refusal = _not_offered(case, action, request)
        if refusal:
            # A confirm page for an action the case page does not offer would describe what
            # cannot happen: say why in plain words on the case page instead.
            model_admin.message_user(request, refusal, messages.ERROR)
            return HttpResponseRedirect(back)
        form = ActionForm(
            initial={"expected_version": case.version}, needs_reason=action.needs_reason
        )
        return _confirm_page(model_admin, request, case, action, form)
    form = ActionForm(request.POST, needs_reason=action.needs_reason)
    if not form.is_valid():
        if "reason" in form.errors and "expected_version" not in form.errors:
            # Asked again, on the same page: what is missing is said by the field.
            why = (
                errors_in_words(form)  # a reason given but refused (too long, a control)
                if str(request.POST.get("reason", "")).strip()
                else "give a reason for this action."
            )
            model_admin.message_user(request, f"Nothing was done: {why}", messages.ERROR)
            return _confirm_page(model_admin, request, case, action, form)
        model_admin.message_user(
            request,
            "Nothing was done: the page was incomplete; reload it and try again.",
            messages.ERROR,
        )
        return HttpResponseRedirect(back)
    reason = form.cleaned_data["reason"]
    try:
        message = action_run(
            case=case,
            name=name,
            actor=person(request),
            expected_version=form.cleaned_data["expected_version"],
            reason=reason,
        )
    except CaseError as exc:
        refused = f"Nothing was done: {exc.detail}"
        case = scoped_case(model_admin, request, pk)
        if reason and isinstance(exc, VersionConflict) and not _not_offered(case, action, request):
            # Someone changed the case meanwhile: the page shows it as it is now, with the
            # reason as typed, to confirm again (or go back). Nothing typed is lost.
            model_admin.message_user(request, _changed_meanwhile(case, exc), messages.ERROR)
            form = ActionForm(
                initial={"expected_version": case.version, "reason": reason},
                needs_reason=action.needs_reason,
            )
            return _confirm_page(model_admin, request, case, action, form)
        if reason:
            # The action is not possible any more: the reason as typed goes with the refusal.
            refused += f" What you wrote: “{reason}”"
        model_admin.message_user(request, refused, messages.ERROR)
    else:
        model_admin.message_user(request, message, messages.SUCCESS)
    return HttpResponseRedirect(back)


def _changed_meanwhile(case: Case, exc: VersionConflict) -> str:
    """The refusal of a confirm whose case changed meanwhile, naming the last change."""
    last = CaseEvent.objects.filter(case=case).select_related("actor").order_by("-id").first()
    what = ""
    if last is not None:
        sentence = event_sentence(last)
        text = sentence.text if sentence.actor_named else f"{sentence.text}, by {sentence.actor}"
        what = f": {text}"
    seen = exc.extra.get("expected_version")
    return (
        f"Nothing was done: {case.reference} changed while you were deciding (version {seen} → "
        f"{case.version}{what}). Here it is as it is now, with your reason kept: check it and "
        "confirm again, or go back."
    )


def _confirm_page(
    model_admin: ModelAdmin[Case],
    request: HttpRequest,
    case: Case,
    action: CaseAction,
    form: ActionForm,
) -> TemplateResponse:
    """The action's confirm page: what it does, and the form asking why."""
    return TemplateResponse(
        request,
        "admin/cases/case/transition_confirm.html",
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.model._meta,
            "case": case,
            "name": action.name,
            "label": action.label_for(case),
            "consequence": action.confirm_for(case),
            "confirm_label": action.confirm_label_for(case),
            "danger": action.danger,
            "form": form,
            "title": f"{case.reference}: {action.label_for(case)}",
        },
    )


def evidence_view(model_admin: ModelAdmin[Case], request: HttpRequest, case: Case) -> HttpResponse:
    """The "Record an evidence reference" form: one ``services.evidence_record`` call."""
    back = change_url(case)
    if request.method != "POST":
        raise PermissionDenied
    form = EvidenceForm(request.POST, prefix="evidence")
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
        model_admin.message_user(request, f"Evidence not recorded: {errors}", messages.ERROR)
        return HttpResponseRedirect(back)
    data = dict(form.cleaned_data)
    version = data.pop("expected_version")
    try:
        services.evidence_record(case=case, expected_version=version, actor=person(request), **data)
    except CaseError as exc:
        model_admin.message_user(request, exc.detail, messages.ERROR)
    else:
        model_admin.message_user(request, "Evidence reference recorded.", messages.SUCCESS)
    return HttpResponseRedirect(back)


EVIDENCE_FORM = CaseForm(
    name="evidence",
    build=lambda case: EvidenceForm(initial={"expected_version": case.version}, prefix="evidence"),
    view=evidence_view,
)


def case_forms() -> list[CaseForm]:
    """The kernel's own case-page form, then those the apps registered."""
    return [EVIDENCE_FORM, *(f for f in EXTENSIONS.forms.values() if f.name != "evidence")]
