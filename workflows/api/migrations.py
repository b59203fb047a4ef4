"""The bulk migration API, mirroring the Migrate dialog (included at ``/api/v1/migrations/``).

- ``GET  /api/v1/migrations/?definition_id=&scope=`` — applied migration records, newest first.
- ``POST /api/v1/migrations/`` — freeze a selection (one entry per position row: ``node``,
  ``kind``, ``action`` move/cancel/end, ``target_node`` for a move, ``runs`` ``"all"`` or a
  list of run ids parked there) as a previewed record and answer it with its preview facts;
  with ``"apply": true`` also apply the first bounded batch; ``"notify_digest": true`` sends
  the assignees whose approvals the moves reopen for them one digest each instead of no notice
  (default ``WORKFLOWS["MIGRATE"]["DIGEST_NOTICES"]``). Nothing selected: ``200`` with
  ``"id": null`` — nothing changed.
- ``GET  /api/v1/migrations/{id}/`` — a record: who, when, why, source → target, rows, counts.
- ``POST /api/v1/migrations/{id}/apply/`` — apply the next batch (``MIGRATE.APPLY_BATCH``);
  call again while ``left`` is above zero. More than 100 runs need ``confirm`` = their number.
- ``GET  /api/v1/migrations/{id}/runs/?status=`` — the outcome of every run, paged.
- ``POST /api/v1/migrations/{id}/apply/`` with ``"background": true`` — hand the record to a
  background task that applies every batch (the answer comes at once; poll the record).
- ``POST /api/v1/migrations/{id}/pause/``, ``/resume/``, ``/close/`` (``{"reason": ...}``,
  required) — the operator's controls of a background apply; a refusal is problem+json
  (409 ``MIGRATION_ILLEGAL_STATE`` when the record is not in a state that allows it).

Only callers with ``workflows.change_definitionversion`` or ``workflows.migrate_runs``.
Adapters only: input serializer → ``workflows.operations`` / ``workflows.queries`` → output.
"""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from workflows import operations, queries
from workflows.api import pagination, permissions
from workflows.api.base import PAGE, ApiView, errors, query, valid
from workflows.exceptions import MigrationIllegalState

NAME = 255
ITEM_STATUSES = ["SELECTED", "RECORDED", "MOVED", "CANCELLED", "ENDED", "MOVED_ON", "REJECTED", "NOT_APPLIED"]


CanMigrate = permissions.CanMigrateRuns  # the migrate capability (workflows.access)


# --- serializers ----------------------------------------------------------------------------


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": ["all"]},
            {"type": "array", "items": {"type": "string", "format": "uuid"}, "maxItems": 100000},
        ]
    }
)
class RunsField(serializers.Field):
    """``"all"`` (every run parked at the position) or a list of run ids."""

    default_error_messages = {"invalid": 'must be "all" or a list of run ids'}

    def to_internal_value(self, data: Any) -> Any:
        if data == "all":
            return "all"
        if isinstance(data, list) and len(data) <= 100_000:
            child = serializers.UUIDField()
            return [str(child.run_validation(v)) for v in data]
        self.fail("invalid")

    def to_representation(self, value: Any) -> Any:
        return value


class RowInput(serializers.Serializer):
    node = serializers.CharField(max_length=NAME)
    kind = serializers.ChoiceField(choices=["SIGNAL", "TIMER", "TASK", "CALL", "JOIN", "BRANCH"])
    action = serializers.ChoiceField(choices=["move", "cancel", "end"])
    target_node = serializers.CharField(max_length=NAME, required=False, allow_blank=True, default="")
    runs = RunsField()


class MigrationInput(serializers.Serializer):
    scope = serializers.CharField(max_length=NAME, required=False, default="default")
    definition_id = serializers.CharField(max_length=NAME)
    source_version = serializers.IntegerField(min_value=1, max_value=2_147_483_647)
    target_version = serializers.IntegerField(min_value=1, max_value=2_147_483_647)
    rows = serializers.ListField(child=RowInput(), max_length=500)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    apply = serializers.BooleanField(required=False, default=False)
    confirm = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    # one digest per assignee whose approvals the moves reopen for them, instead of no notice;
    # absent or null: WORKFLOWS["MIGRATE"]["DIGEST_NOTICES"]
    notify_digest = serializers.BooleanField(required=False, allow_null=True, default=None)


class ApplyInput(serializers.Serializer):
    confirm = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    background = serializers.BooleanField(required=False, default=False)


class CloseInput(serializers.Serializer):
    reason = serializers.CharField(max_length=1000, allow_blank=True)


class RecordFilters(serializers.Serializer):
    definition_id = serializers.CharField(max_length=NAME, required=False)
    scope = serializers.CharField(max_length=NAME, required=False)


class ItemFilters(serializers.Serializer):
    status = serializers.ChoiceField(choices=ITEM_STATUSES, required=False)


class RowOut(serializers.Serializer):
    row = serializers.IntegerField()
    node = serializers.CharField()
    kind = serializers.CharField()
    action = serializers.CharField()
    target_node = serializers.CharField()
    selection = serializers.ChoiceField(choices=["all", "picked"])
    runs = serializers.IntegerField()


class MigrationOut(serializers.Serializer):
    id = serializers.IntegerField()
    scope = serializers.CharField()
    definition_id = serializers.CharField()
    source_version = serializers.IntegerField()
    target_version = serializers.IntegerField()
    target_scope = serializers.CharField()
    status = serializers.CharField()
    reason = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    applied_by = serializers.CharField()
    applied_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    total = serializers.IntegerField()
    notify_digest = serializers.BooleanField()
    rows = RowOut(many=True)
    counts = serializers.DictField(child=serializers.IntegerField(), required=False)
    left = serializers.IntegerField(required=False)
    in_flight = serializers.IntegerField(required=False)
    settled = serializers.IntegerField(required=False)
    percent = serializers.IntegerField(required=False)
    background = serializers.BooleanField(required=False)
    paused_by = serializers.CharField(required=False)
    closed_by = serializers.CharField(required=False)
    close_reason = serializers.CharField(required=False)
    preview = serializers.ListField(child=serializers.DictField(), required=False)


class ItemOut(serializers.Serializer):
    run = serializers.UUIDField(source="run_id")
    business_key = serializers.CharField(source="run.business_key")
    source_node = serializers.CharField()
    kind = serializers.CharField()
    action = serializers.CharField()
    target_node = serializers.CharField()
    status = serializers.CharField()
    detail = serializers.CharField()
    command = serializers.IntegerField(source="command_id", allow_null=True)
    updated_at = serializers.DateTimeField(allow_null=True)


class NothingSelectedOut(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True)
    total = serializers.IntegerField()
    detail = serializers.CharField()


# --- helpers --------------------------------------------------------------------------------


class RecordCursor(pagination.Cursor):
    ordering = ("-created_at", "-id")


class ItemCursor(pagination.Cursor):
    ordering = ("id",)
    position_kind = "integer"


def record_of(record_id: int) -> Any:
    try:
        return queries.migration_record(record_id=record_id)
    except MigrationIllegalState:
        raise NotFound("no such migration") from None


RECORD_FIELDS = (
    "id",
    "scope",
    "definition_id",
    "source_version",
    "target_version",
    "target_scope",
    "status",
    "reason",
    "created_by",
    "created_at",
    "applied_by",
    "applied_at",
    "finished_at",
    "total",
    "background",
    "paused_by",
    "closed_by",
    "close_reason",
    "notify_digest",
)


def as_dict(record: Any, *, progress: Any = None, preview: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {f: getattr(record, f) for f in RECORD_FIELDS}
    data["rows"] = record.rows
    if progress is not None:
        data.update(
            counts=progress.counts,
            left=progress.left,
            in_flight=progress.in_flight,
            status=progress.status,
            settled=progress.settled,
            percent=progress.percent,
        )
    if preview:
        facts = {f["row"]: f for f in queries.migration_row_facts(record_id=record.id)}
        data["preview"] = [
            {
                "row": row["row"],
                "withdrawn": facts.get(row["row"], {}).get("tasks", []),
                "timers": facts.get(row["row"], {}).get("timers", {}),
                "target": queries.migration_target_facts(
                    scope=record.scope,
                    definition_id=record.definition_id,
                    version=record.target_version,
                    node=row["target_node"],
                )
                if row["action"] == "move"
                else None,
            }
            for row in record.rows
        ]
    return data


# --- views ----------------------------------------------------------------------------------


class MigrationsView(ApiView):
    read_permission = CanMigrate
    write_permission = CanMigrate
    pagination_class = RecordCursor

    @extend_schema(
        operation_id="migrations_list",
        tags=["migrations"],
        summary="Applied migrations of parked runs",
        parameters=[RecordFilters, *PAGE],
        responses={200: MigrationOut(many=True), **errors(400, 404, e404="NOT_FOUND: an invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        filters = query(request, RecordFilters)
        records = queries.migration_records(scope=filters.get("scope"), definition_id=filters.get("definition_id"))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(records, request, view=self) or []
        return paginator.get_paginated_response(MigrationOut([as_dict(r) for r in page], many=True).data)

    @extend_schema(
        operation_id="migrations_create",
        tags=["migrations"],
        summary="Freeze a selection of parked runs per position (and optionally apply the first batch)",
        request=MigrationInput,
        responses={
            201: OpenApiResponse(MigrationOut, description="the frozen selection with what Apply will do"),
            200: OpenApiResponse(NothingSelectedOut, description="nothing is selected: nothing changed"),
            **errors(400, 409, 413, 415, 503),
        },
    )
    def post(self, request: Request) -> Response:
        body = valid(MigrationInput, request.data)
        record_id = operations.migration_preview(
            scope=body["scope"],
            definition_id=body["definition_id"],
            source_version=body["source_version"],
            target_version=body["target_version"],
            rows=[dict(r) for r in body["rows"]],
            actor=request.user,
            reason=" ".join(body["reason"].split()),
            notify_digest=body.get("notify_digest"),
        )
        if record_id is None:
            return Response({"id": None, "total": 0, "detail": "nothing is selected; nothing changed"})
        progress = None
        if body["apply"]:
            progress = operations.migration_apply(record_id=record_id, actor=request.user, confirm=body.get("confirm"))
        record = record_of(record_id)
        return Response(
            MigrationOut(as_dict(record, progress=progress, preview=True)).data, status=status.HTTP_201_CREATED
        )


RECORD_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the migration record's id")


class MigrationView(ApiView):
    read_permission = CanMigrate

    @extend_schema(
        operation_id="migrations_read",
        tags=["migrations"],
        summary="A migration record with its counts",
        parameters=[RECORD_ID],
        responses={200: MigrationOut, **errors(404)},
    )
    def get(self, request: Request, id: int) -> Response:
        record = record_of(id)
        progress = operations.migration_progress(record_id=record.id)
        return Response(MigrationOut(as_dict(record_of(id), progress=progress)).data)


class MigrationApplyView(ApiView):
    write_permission = CanMigrate

    @extend_schema(
        operation_id="migrations_apply",
        tags=["migrations"],
        summary="Apply the next bounded batch of a migration",
        parameters=[RECORD_ID],
        request=ApplyInput,
        responses={200: MigrationOut, **errors(400, 404, 409, 413, 415, 503)},
    )
    def post(self, request: Request, id: int) -> Response:
        body = valid(ApplyInput, request.data or {})
        record_of(id)
        apply = operations.migration_apply_background if body["background"] else operations.migration_apply
        progress = apply(record_id=id, actor=request.user, confirm=body.get("confirm"))
        return Response(MigrationOut(as_dict(record_of(id), progress=progress)).data)


class MigrationPauseView(ApiView):
    write_permission = CanMigrate

    @extend_schema(
        operation_id="migrations_pause",
        tags=["migrations"],
        summary="Pause a migration applied in the background (the batch under way finishes)",
        parameters=[RECORD_ID],
        request=None,
        responses={200: MigrationOut, **errors(404, 409, 503)},
    )
    def post(self, request: Request, id: int) -> Response:
        record_of(id)
        progress = operations.migration_pause(record_id=id, actor=request.user)
        return Response(MigrationOut(as_dict(record_of(id), progress=progress)).data)


class MigrationResumeView(ApiView):
    write_permission = CanMigrate

    @extend_schema(
        operation_id="migrations_resume",
        tags=["migrations"],
        summary="Resume a paused migration in the background",
        parameters=[RECORD_ID],
        request=None,
        responses={200: MigrationOut, **errors(404, 409, 503)},
    )
    def post(self, request: Request, id: int) -> Response:
        record_of(id)
        progress = operations.migration_resume(record_id=id, actor=request.user)
        return Response(MigrationOut(as_dict(record_of(id), progress=progress)).data)


class MigrationCloseView(ApiView):
    write_permission = CanMigrate

    @extend_schema(
        operation_id="migrations_close",
        tags=["migrations"],
        summary="Close an applying or paused migration as partially applied (a reason is required)",
        parameters=[RECORD_ID],
        request=CloseInput,
        responses={200: MigrationOut, **errors(400, 404, 409, 413, 415, 503)},
    )
    def post(self, request: Request, id: int) -> Response:
        body = valid(CloseInput, request.data or {})
        record_of(id)
        progress = operations.migration_close(record_id=id, reason=body["reason"], actor=request.user)
        return Response(MigrationOut(as_dict(record_of(id), progress=progress)).data)


class MigrationRunsView(ApiView):
    read_permission = CanMigrate
    pagination_class = ItemCursor

    @extend_schema(
        operation_id="migrations_runs",
        tags=["migrations"],
        summary="The outcome of every run of a migration",
        parameters=[RECORD_ID, ItemFilters, *PAGE],
        responses={200: ItemOut(many=True), **errors(400, 404)},
    )
    def get(self, request: Request, id: int) -> Response:
        filters = query(request, ItemFilters)
        record_of(id)
        items = queries.migration_items(record_id=id, status=filters.get("status"))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(items, request, view=self) or []
        return paginator.get_paginated_response(ItemOut(page, many=True).data)


urlpatterns = [
    path("", MigrationsView.as_view(), name="migrations"),
    path("<int:id>/", MigrationView.as_view(), name="migration"),
    path("<int:id>/apply/", MigrationApplyView.as_view(), name="migration-apply"),
    path("<int:id>/runs/", MigrationRunsView.as_view(), name="migration-runs"),
    path("<int:id>/pause/", MigrationPauseView.as_view(), name="migration-pause"),
    path("<int:id>/resume/", MigrationResumeView.as_view(), name="migration-resume"),
    path("<int:id>/close/", MigrationCloseView.as_view(), name="migration-close"),
]
