"""The kernel admin's forms: they collect input for one service call and check its shape only;
the services decide what is allowed."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model

from cases import selectors
from cases.models import Case, CustomerAccount, EvidenceReference
from cases.validation import REASON_MAX_LENGTH, TextValidator, one_length_message

User = get_user_model()


class BoundedCharField(forms.CharField):
    """A text field whose ``cases.validation`` validator checks the length in its own words:
    Django's check stays only as the widget's ``maxlength`` (one message, not two)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = one_length_message(self.validators)


class CaseChangeForm(forms.ModelForm):
    """The case page's editable fields; owner and backup are offered from the case's team,
    among those who may work a case (``selectors.case_workers``)."""

    expected_version = forms.IntegerField(widget=forms.HiddenInput)
    change_reason = forms.CharField(
        required=False, max_length=500, help_text="Why (kept in the timeline)."
    )

    class Meta:
        model = Case
        fields = ["owner", "backup", "outstanding_question", "next_check_at"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["expected_version"].initial = self.instance.version
            members = selectors.case_workers(self.instance.team)
            for name in ("owner", "backup"):
                if name in self.fields:
                    self.fields[name].queryset = members  # type: ignore[attr-defined]
        label_split_inputs(self, "next_check_at", ("Next check date", "Next check time"))

    def clean(self) -> dict[str, Any]:
        """A page read before the case changed is refused here, with what was typed kept on the
        page and the version it now shows set, so a second save (after a look) goes through.
        Refused by the service after a redirect before, the typed text was lost. The services
        still check the version (a change between this check and the save is refused there)."""
        data = super().clean() or self.cleaned_data
        expected = data.get("expected_version")
        if self.instance.pk and expected is not None:
            now = Case.objects.filter(pk=self.instance.pk).values_list("version", flat=True).first()
            if now is not None and now != expected:
                # The bound data (immutable as received), with the version shown now.
                shown = {self.add_prefix("expected_version"): str(now)}
                self.data = {**dict(self.data.items()), **shown}
                raise forms.ValidationError(
                    f"The case changed since you read it (you had version {expected}, it is "
                    f"now version {now}). What you typed is kept below: look at the case as "
                    "it is now, then save again."
                )
        return data


def errors_in_words(form: forms.BaseForm) -> str:
    """A refused form's errors for a message: each field by its label ("Summary: Ensure this
    value has at most 280 characters."), the form's own errors as they are."""
    said = {name: " ".join(str(e) for e in errors) for name, errors in form.errors.items()}
    return "; ".join(
        f"{form[name].label}: {text}" if name in form.fields else text
        for name, text in said.items()
    )


def label_split_inputs(form: forms.BaseForm, name: str, labels: tuple[str, ...]) -> None:
    """Name each input of a split widget (the admin's date and time of one field): its
    ``<label>`` points at the first only, so a screen reader announces the others unnamed."""
    field = form.fields.get(name)
    widgets = getattr(field.widget, "widgets", ()) if field is not None else ()
    for widget, label in zip(widgets, labels, strict=False):
        widget.attrs["aria-label"] = label


class ActionForm(forms.Form):
    """A case action's confirmation: the version the person saw and, where asked, why."""

    expected_version = forms.IntegerField(widget=forms.HiddenInput, min_value=1)
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Kept in the case's timeline.",
    )

    def __init__(self, *args: Any, needs_reason: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = needs_reason
        if not needs_reason:
            self.fields["reason"].help_text = "Optional. Kept in the case's timeline."


class AbsenceForm(forms.Form):
    """The home page's "Away and back" form, offering the people of the user's teams."""

    user = forms.ModelChoiceField(queryset=User.objects.none())
    away_until = forms.DateField(required=False)

    def __init__(self, *args: Any, people: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["user"].queryset = people  # type: ignore[attr-defined]


class EvidenceForm(forms.ModelForm):
    """An evidence reference for ``services.evidence_record``, with the version the person saw."""

    expected_version = forms.IntegerField(widget=forms.HiddenInput)

    class Meta:
        model = EvidenceReference
        fields = [
            "source_system",
            "external_reference",
            "kind",
            "permitted_basis",
            "summary",
            "order_version",
        ]


class CustomerAccountForm(forms.ModelForm):
    """An account's name and email, with the reason ``services.account_update`` requires asked
    for on the form (so the person sees it next to the field, before the service refuses)."""

    change_reason = BoundedCharField(
        required=False,
        max_length=REASON_MAX_LENGTH,
        validators=[TextValidator(REASON_MAX_LENGTH)],
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why the name or email changes (required; kept on each open case's timeline).",
    )

    class Meta:
        model = CustomerAccount
        fields = ["reference", "name", "email", "team"]

    def clean(self) -> dict[str, Any] | None:
        data = super().clean()
        changes_contact = self.instance.pk and {"name", "email"} & set(self.changed_data)
        if changes_contact and not ((data or {}).get("change_reason") or "").strip():
            self.add_error("change_reason", "Give a reason for the change.")
        return data
