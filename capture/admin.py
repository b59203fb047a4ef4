"""Captures in the admin: a read-only list and detail, and the reconcile screen.

The reconcile screen (``admin/capture/capture/reconcile/``) lists the captures dispatch could
not settle (FAILED, OUTCOME_UNKNOWN) with what is known about each; Replay and Resolve open a
confirmation page that asks for the reason. Only administrators (superusers, or users with
``capture.reconcile_capture``) reach it; anyone else signed in gets 403. The screen changes
nothing itself: it calls :func:`capture.reconcile.reconcile`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect

from capture import reconcile as reconciling
from capture.models import UNRESOLVED, Capture, CaptureStatus
from workflows import access, queries
from workflows.exceptions import WorkflowError

PAGE_SIZE = 50
DECISIONS = {
    "replay": {
        "title": _("Replay capture %(pk)s"),
        "button": _("Replay capture"),
        "explain": _(
            "The whole captured event is dispatched again: the triggers eligible now are evaluated "
            "and their runs started, and any dispatch effect runs again."
        ),
    },
    "resolve": {
        "title": _("Resolve capture %(pk)s"),
        "button": _("Resolve capture"),
        "explain": _("The capture is closed as resolved: nothing is dispatched, nothing runs again."),
    },
}


class ReasonForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        max_length=reconciling.REASON_LIMIT,
        error_messages={"required": _("Give the reason for this decision.")},
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "aria-describedby": "reason-help"}),
        help_text=_("Why this is the right decision, e.g. what you checked in the other system. Kept on the capture."),
    )

    def clean_reason(self) -> str:
        text = str(self.cleaned_data.get("reason", "")).strip()
        if not text:
            raise forms.ValidationError(_("Give the reason for this decision."))
        return text


def record_link(capture: Capture) -> str:
    """``app.Model #pk``, linked to the record's admin page while the record exists."""
    label = f"{capture.model} #{capture.object_pk}"
    if capture.event == "deleted":
        return format_html("{} <span class='quiet'>(deleted)</span>", label)
    app_label, _, model_name = capture.model.partition(".")
    try:
        url = reverse(f"admin:{app_label}_{model_name.lower()}_change", args=[capture.object_pk])
    except NoReverseMatch:
        return label
    return format_html('<a href="{}">{}</a>', url, label)


def run_links(runs: list[Any]) -> str:
    """The runs as "workflow (status)" links to the run viewer, which asks for the view runs
    capability itself (``—`` when there are none)."""
    if not runs:
        return "—"
    return format_html_join(
        ", ",
        '<a href="{}">{} ({})</a>',
        ((reverse("workflows:runs:detail", args=[r.id]), r.definition_id, r.status.lower()) for r in runs),
    )


class RecordRunsMixin(admin.ModelAdmin):  # type: ignore[type-arg]
    """For a host's ``ModelAdmin`` of a captured model: the record's change page lists its
    workflow runs (those its captures started and those whose subject is the record),
    newest first, each linked to the run viewer. ``class OrderAdmin(RecordRunsMixin, admin.ModelAdmin)``."""

    RUNS_SHOWN = 50

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, "workflow_runs") if obj is not None else fields

    @admin.display(description=_("workflow runs"))
    def workflow_runs(self, obj: Any) -> str:
        label, pk = obj._meta.label_lower, str(obj.pk)
        started = [
            str(run_id)
            for ids in Capture.objects.filter(model=label, object_pk=pk).values_list("runs_started", flat=True)
            for run_id in ids or []
        ]
        runs = list(
            queries.runs()
            .filter(Q(id__in=started) | Q(subject_type=label, subject_id=pk))
            .order_by("-created_at")[: self.RUNS_SHOWN]
        )
        return run_links(runs)


def administrators_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Signed out: the admin login. Signed in without the right: 403 (not a login page)."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not reconciling.is_administrator(request.user):
            raise PermissionDenied("only administrators reconcile captures")
        return view(request, *args, **kwargs)

    return csrf_protect(never_cache(guarded))


@admin.register(Capture)
class CaptureAdmin(admin.ModelAdmin):
    list_display = ("id", "record", "event", "status", "attempts", "actor_name", "created_at", "dispatched_at", "error")
    list_filter = ("status", "event", "model")
    search_fields = ("=object_pk", "model", "actor_name", "last_error")
    ordering = ("-id",)
    date_hierarchy = "created_at"
    readonly_fields = [*(f.name for f in Capture._meta.fields), "started_runs"]
    change_list_template = "admin/capture/capture/change_list.html"
    change_form_template = "admin/capture/capture/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return access.has(request.user, access.Capability.VIEW_CAPTURES)  # as the API's capture list

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the retention task deletes old dispatched captures; the rest is evidence

    @admin.display(description=_("record"))
    def record(self, obj: Capture) -> str:
        return record_link(obj)

    @admin.display(description=_("runs started"))
    def started_runs(self, obj: Capture) -> str:
        ids = [str(i) for i in obj.runs_started or []]
        return run_links(list(queries.runs().filter(id__in=ids).order_by("created_at")))

    @admin.display(description=_("last error"))
    def error(self, obj: Capture) -> str:
        return obj.last_error[:120]

    def get_urls(self) -> list[URLPattern]:
        return [
            path("reconcile/", administrators_only(self.reconcile_list_view), name="capture_capture_reconcile"),
            path(
                "<int:capture_id>/reconcile/<str:decision>/",
                administrators_only(self.reconcile_confirm_view),
                name="capture_capture_reconcile_confirm",
            ),
            *super().get_urls(),
        ]

    def _context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "title": title, "opts": self.model._meta}

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {
            **(extra_context or {}),
            "unresolved_count": Capture.objects.filter(status__in=UNRESOLVED).count(),
            "can_reconcile": reconciling.is_administrator(request.user),
        }
        return super().changelist_view(request, extra_context=extra)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        capture = Capture.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        extra = {
            **(extra_context or {}),
            "reconcilable": capture is not None and capture.unresolved,
            "can_reconcile": reconciling.is_administrator(request.user),
        }
        return super().change_view(request, object_id, form_url, extra_context=extra)

    # --- the reconcile screen ----------------------------------------------------------------

    def reconcile_list_view(self, request: HttpRequest) -> HttpResponse:
        shown = request.GET.get("status", "")
        rows: QuerySet[Capture] = Capture.objects.filter(status__in=UNRESOLVED).order_by("created_at", "id")
        if shown in UNRESOLVED:
            rows = rows.filter(status=shown)
        page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
        return TemplateResponse(
            request,
            "capture/admin/reconcile_list.html",
            {
                **self._context(request, str(_("Captures to reconcile"))),
                "page": page,
                "rows": [{"capture": c, "record": record_link(c)} for c in page.object_list],
                "shown": shown,
                "statuses": [(s.value, s.label) for s in (CaptureStatus.FAILED, CaptureStatus.OUTCOME_UNKNOWN)],
            },
        )

    def reconcile_confirm_view(self, request: HttpRequest, capture_id: int, decision: str) -> HttpResponse:
        if decision not in DECISIONS:
            raise Http404("no such decision")
        capture = Capture.objects.filter(pk=capture_id).first()
        if capture is None:
            raise Http404("capture not found")
        back = reverse("admin:capture_capture_reconcile")
        form = ReasonForm(request.POST if request.method == "POST" else None)
        refused = ""
        if request.method == "POST" and form.is_valid():
            try:
                done = reconciling.reconcile(
                    capture_id=capture.pk,
                    replay=decision == "replay",
                    reason=form.cleaned_data["reason"],
                    by=request.user,
                )
            except WorkflowError as error:
                refused = error.message
            else:
                if done.replayed:
                    notice = _("Capture %(pk)s was queued for dispatch again.") % {"pk": done.pk}
                else:
                    notice = _("Capture %(pk)s was resolved.") % {"pk": done.pk}
                self.message_user(request, notice, messages.SUCCESS)
                return HttpResponseRedirect(back)
        text = DECISIONS[decision]
        status = 409 if refused else 200
        return TemplateResponse(
            request,
            "capture/admin/reconcile_confirm.html",
            {
                **self._context(request, str(text["title"] % {"pk": capture.pk})),
                "capture": capture,
                "record": record_link(capture),
                "decision": decision,
                "text": text,
                "form": form,
                "refused": refused,
                "back": back,
            },
            status=status,
        )
