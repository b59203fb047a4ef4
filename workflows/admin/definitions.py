"""Admin for definition versions and activation records.

Rows are read-only here: every action calls the lifecycle functions of
``workflows.definitions``, which own their transactions and refusals; a refusal is shown as
an error message with its code. The one editable field, a version's retention override, is
saved through ``operations.set_retention_days`` (that column only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from workflows import access, definitions, operations
from workflows.access import Capability
from workflows.exceptions import WorkflowError
from workflows.models import Activation, DefinitionVersion

PUBLISHED = _("Published %(count)s version(s).")
ACTIVATED = _("Activated %(count)s version(s).")
DEPRECATED = _("Deprecated %(count)s version(s).")
RETIRED = _("Retired %(count)s version(s).")
REINSTATED = _("Reinstated %(count)s version(s).")


def _each(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Any], verb: str, call: Callable[[Any], Any]
) -> None:
    done = 0
    for row in queryset.order_by("scope", "definition_id", "version"):
        try:
            call(row)
            done += 1
        except WorkflowError as error:
            modeladmin.message_user(request, f"{row}: {error.code}: {error.message}", messages.ERROR)
    if done:
        modeladmin.message_user(request, verb % {"count": done}, messages.SUCCESS)


def _key(row: DefinitionVersion) -> dict[str, Any]:
    return {"scope": row.scope, "definition_id": row.definition_id, "version": row.version}


@admin.register(DefinitionVersion)
class DefinitionVersionAdmin(admin.ModelAdmin):
    list_display = ("definition_id", "version", "scope", "status", "contract", "packaged", "short_hash", "published_at")
    list_filter = ("status", "scope", "packaged", "kind")
    search_fields = ("definition_id", "contract")
    ordering = ("definition_id", "scope", "-version")
    actions = ["publish", "activate", "deprecate", "retire", "reinstate"]
    # the stored document as written: the admin's plain display of a text field joins its lines
    # with <br> and collapses the indentation YAML depends on
    # everything but the retention override (docs/operations.md, "Retention") is read-only
    readonly_fields = [
        ("document" if f.name == "text" else f.name)
        for f in DefinitionVersion._meta.fields
        if f.name != "retention_days"
    ]
    exclude = ("text",)  # shown read-only as "document"; never an editable form field

    @admin.display(description=_("document"))
    def document(self, obj: DefinitionVersion) -> SafeString:
        return format_html(
            '<pre class="definition-document" style="white-space: pre; overflow: auto; max-height: 40rem; '
            'max-width: 100%; margin: 0; font-family: ui-monospace, monospace;">{}</pre>',
            obj.text,
        )

    @admin.display(description=_("plan hash"))
    def short_hash(self, obj: DefinitionVersion) -> str:
        return obj.plan_hash[:12]

    def save_model(self, request: HttpRequest, obj: DefinitionVersion, form: Any, change: bool) -> None:
        # only the retention override: the other columns belong to the lifecycle, and a whole-row
        # save could write back a status a publication changed meanwhile
        operations.set_retention_days(
            scope=obj.scope, definition_id=obj.definition_id, version=obj.version, days=obj.retention_days
        )

    def has_deploy_permission(self, request: HttpRequest) -> bool:
        return access.has(request.user, Capability.DEPLOY)  # the API's and the designer's capability

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # load documents through the designer, the API or manage.py definition_load

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # retire instead: rows are the pins of runs

    @admin.action(description=_("Publish selected versions"), permissions=["deploy"])
    def publish(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(self, request, queryset, str(PUBLISHED), lambda row: definitions.publish(**_key(row)))

    @admin.action(description=_("Activate selected versions in their scope"), permissions=["deploy"])
    def activate(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        user = request.user.get_username()
        _each(self, request, queryset, str(ACTIVATED), lambda row: definitions.activate(**_key(row), updated_by=user))

    @admin.action(description=_("Deprecate selected versions"), permissions=["deploy"])
    def deprecate(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(self, request, queryset, str(DEPRECATED), lambda row: definitions.deprecate(**_key(row)))

    @admin.action(description=_("Retire selected versions"), permissions=["deploy"])
    def retire(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(self, request, queryset, str(RETIRED), lambda row: definitions.retire(**_key(row)))

    @admin.action(description=_("Reinstate selected versions"), permissions=["deploy"])
    def reinstate(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _each(self, request, queryset, str(REINSTATED), lambda row: definitions.reinstate(**_key(row)))


@admin.register(Activation)
class ActivationAdmin(admin.ModelAdmin):
    list_display = ("definition_id", "scope", "target_scope", "version", "updated_by", "updated_at")
    list_filter = ("scope",)
    search_fields = ("definition_id",)
    actions = ["follow_default"]
    readonly_fields = [f.name for f in Activation._meta.fields]

    def save_model(self, request: HttpRequest, obj: DefinitionVersion, form: Any, change: bool) -> None:
        # only the retention override: the other columns belong to the lifecycle, and a whole-row
        # save could write back a status a publication changed meanwhile
        operations.set_retention_days(
            scope=obj.scope, definition_id=obj.definition_id, version=obj.version, days=obj.retention_days
        )

    def has_deploy_permission(self, request: HttpRequest) -> bool:
        return access.has(request.user, Capability.DEPLOY)  # the API's and the designer's capability

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # activate from the definition versions list

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(
        description=_("Remove the record (follow the default / deactivate the default)"), permissions=["deploy"]
    )
    def follow_default(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for row in queryset:
            try:
                if row.scope == "default":
                    definitions.deactivate_default(definition_id=row.definition_id)
                else:
                    definitions.follow(scope=row.scope, definition_id=row.definition_id)
            except WorkflowError as error:
                self.message_user(request, f"{row}: {error.code}: {error.message}", messages.ERROR)
        self.message_user(request, _("Records removed."), messages.SUCCESS)
