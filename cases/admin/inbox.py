"""The inbox (each person's own notifications), their email preferences, and the leads'
follow-up policies. Every change goes through one service of ``cases.inbox``; nobody sees or
touches another person's notifications."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme

from cases import inbox, kinds
from cases.admin.filters import PrintableChoicesFilter
from cases.admin.views import person
from cases.exceptions import CaseError
from cases.models import FollowUpPolicy, Notification, NotificationKind, WaitReason


class ReadFilter(admin.SimpleListFilter):
    title = "read"
    parameter_name = "unread"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Unread"), ("no", "Read")]

    def queryset(self, request: Any, queryset: Any) -> Any:
        if self.value() == "yes":
            return queryset.filter(read_at__isnull=True)
        if self.value() == "no":
            return queryset.filter(read_at__isnull=False)
        return queryset


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """The inbox: "Open" reads the notification and goes to its page; "Mark read" the chosen
    ones; "Email settings" the person's preferences."""

    change_list_template = "admin/cases/notification/change_list.html"
    list_display = ["when", "what", "case_link", "now", "email", "read"]
    list_display_links = None
    list_filter = [("kind", PrintableChoicesFilter), ReadFilter]
    actions = ["mark_read"]
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[Notification]:
        # Whether each one's case still waits on the reader ("Mine to answer now"): a message
        # of an hour ago may have been answered since, by them or by another.
        waiting = inbox.cases_to_answer(request.user).filter(pk=OuterRef("case_id"))
        return inbox.inbox_for(request.user).annotate(still_yours=Exists(waiting))

    # Every staff member has an inbox of their own, whatever their role's permissions.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request) and (
            obj is None or obj.recipient_id == request.user.pk
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # The admin offers an action only to those with its permission: "view" here.
        actions = super().get_actions(request)
        return {k: v for k, v in actions.items() if k == "mark_read"}

    @admin.action(description="Mark the selected notifications read", permissions=["view"])
    def mark_read(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        count = inbox.notifications_mark_read(
            user=request.user, ids=queryset.values_list("pk", flat=True)
        )
        self.message_user(request, f"{count} notification(s) marked read.", messages.SUCCESS)

    @admin.display(description="When", ordering="created_at")
    def when(self, obj: Notification) -> str:
        return date_format(timezone.localtime(obj.created_at), "DATETIME_FORMAT")

    @admin.display(description="What")
    def what(self, obj: Notification) -> str:
        url = reverse("admin:cases_notification_open", args=[obj.pk])
        text = obj.text if obj.read_at else format_html("<strong>{}</strong>", obj.text)
        return format_html('<a href="{}">{}</a>', url, text)

    @admin.display(description="Case")
    def case_link(self, obj: Notification) -> str:
        return obj.case.reference

    @admin.display(description="Now")
    def now(self, obj: Notification) -> str:
        """The case as it is now: still the reader's to answer, or where it went since."""
        if getattr(obj, "still_yours", False):
            return format_html("<strong>{}</strong>", "Yours to answer")
        return f"{obj.case.get_status_display()}: not waiting on you"

    @admin.display(description="Email")
    def email(self, obj: Notification) -> str:
        text = obj.get_email_state_display()
        if obj.email_state in (Notification.Email.FAILED, Notification.Email.UNCERTAIN):
            return format_html("{} <small>({})</small>", text, obj.email_last_error)
        return text

    @admin.display(description="Read", boolean=True)
    def read(self, obj: Notification) -> bool:
        return obj.read_at is not None

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            "title": "Your inbox",
            "unread": inbox.unread_count(request.user),
            "read_all_url": reverse("admin:cases_notification_read_all"),
            "preferences_url": reverse("admin:cases_notification_preferences"),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<int:pk>/open/",
                self.admin_site.admin_view(self.open_view),
                name="cases_notification_open",
            ),
            path(
                "read-all/",
                self.admin_site.admin_view(self.read_all_view),
                name="cases_notification_read_all",
            ),
            path(
                "preferences/",
                self.admin_site.admin_view(self.preferences_view),
                name="cases_notification_preferences",
            ),
            *super().get_urls(),
        ]

    def open_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Read the notification and go to its page (the case, or the decision it waits for)."""
        try:
            link = inbox.notification_open(user=request.user, notification_id=pk)
        except Notification.DoesNotExist:
            raise Http404("No such notification in your inbox.") from None
        if not url_has_allowed_host_and_scheme(link, allowed_hosts=None):
            link = reverse("admin:cases_notification_changelist")
        return HttpResponseRedirect(link)

    def read_all_view(self, request: HttpRequest) -> HttpResponse:
        back = reverse("admin:cases_notification_changelist")
        if request.method == "POST":
            count = inbox.notifications_mark_read(user=request.user)
            self.message_user(request, f"{count} notification(s) marked read.", messages.SUCCESS)
        return HttpResponseRedirect(back)

    def preferences_view(self, request: HttpRequest) -> HttpResponse:
        preference = inbox.preference_of(request.user)
        form = PreferencesForm(
            request.POST or None,
            initial={
                "mail": [k for k in NotificationKind.values if k not in preference.email_off],
                "digest": preference.digest,
            },
        )
        if request.method == "POST" and form.is_valid():
            mailed = set(form.cleaned_data["mail"])
            try:
                inbox.preferences_set(
                    user=request.user,
                    email_off=[k for k in NotificationKind.values if k not in mailed],
                    digest=form.cleaned_data["digest"],
                )
            except CaseError as exc:
                self.message_user(request, exc.detail, messages.ERROR)
            else:
                self.message_user(request, "Your email settings are saved.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:cases_notification_changelist"))
        return TemplateResponse(
            request,
            "admin/cases/notification/preferences.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Your email settings",
                "form": form,
                "address": getattr(request.user, "email", ""),
                "digest_hour": f"{inbox.next_digest_at():%H:%M}",
            },
        )


class PreferencesForm(forms.Form):
    mail = forms.MultipleChoiceField(
        label="Send me an email when",
        choices=NotificationKind.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Unticked kinds still reach your inbox; only their email is off.",
    )
    digest = forms.BooleanField(
        label="One daily digest instead of a mail each",
        required=False,
    )


class FollowUpPolicyForm(forms.ModelForm):
    """The service's checks beside their fields (``inbox.follow_up_policy_errors``): the
    database's constraint names ("Constraint … is violated") were the message before."""

    class Meta:
        model = FollowUpPolicy
        fields = ["reason", "kind", "minutes", "at_risk_percent"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The kinds this desk offers, by name: the field was free text for a code.
        if "kind" in self.fields:
            self.fields["kind"] = forms.ChoiceField(
                label="Change kind",
                required=False,
                choices=[("", "Any kind without a policy of its own"), *kinds.choices()],
                help_text="The policy applies to cases of this change kind only.",
            )
        # The browser's own bounds are the service's (``inbox.follow_up_policy_errors``):
        # the minutes field offered 0, which the server refused.
        if "minutes" in self.fields:
            self.fields["minutes"].widget.attrs.update(min=1, max=inbox.POLICY_MAX_MINUTES)
        if "at_risk_percent" in self.fields:
            self.fields["at_risk_percent"].widget.attrs.update(min=0, max=99)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        errors = inbox.follow_up_policy_errors(
            kind=cleaned.get("kind") or "",
            reason=cleaned.get("reason") or (self.instance.reason if self.instance.pk else ""),
            minutes=cleaned.get("minutes"),
            at_risk_percent=cleaned.get("at_risk_percent"),
        )
        for name, said in errors.items():
            if name in self.fields and name not in self.errors:
                self.add_error(name, said)
        return cleaned


@admin.register(FollowUpPolicy)
class FollowUpPolicyAdmin(admin.ModelAdmin):
    """How long each kind of wait on a person may take: saving calls the service."""

    form = FollowUpPolicyForm
    list_display = ["reason", "kind_display", "minutes", "at_risk_percent", "updated_at"]
    list_filter = [("reason", PrintableChoicesFilter)]

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"at_risk_percent": 25, "reason": WaitReason.HELD}

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a policy is changed, never removed behind the desk's back

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["reason", "kind"] if obj is not None else []

    @admin.display(description="change kind")
    def kind_display(self, obj: FollowUpPolicy) -> str:
        return kinds.label_of(obj.kind) if obj.kind else "any kind"

    def save_model(
        self, request: HttpRequest, obj: FollowUpPolicy, form: Any, change: bool
    ) -> None:
        saved = inbox.follow_up_policy_set(
            actor=person(request),
            kind=obj.kind,
            reason=obj.reason,
            minutes=obj.minutes,
            at_risk_percent=obj.at_risk_percent,
        )
        obj.pk = saved.pk
