"""The integration API (DESIGN.md §5): thin adapters, one view per action.

Each view: input serializer (shape only) → ``workflows.operations`` / ``workflows.queries`` /
``workflows.definitions`` → output serializer. Every error, wherever it is raised, is shaped
by ``workflows.api.errors.problem_exception_handler``.

Recording endpoints (start, signal, complete, retry, migrate) answer ``202`` with the recorded
command; with ``?await=N`` (0 to 30 s) they wait for the execution probe on that run and answer
``200`` with the run as it is then.

A run answers ``ETag: "<state_version>"`` and the writes under its path take ``If-Match``
(``run_etag``, ``if_match``): integrators condition a write on the state they read, and the
operation compares under the run's lock (412 STATE_VERSION_MISMATCH, nothing recorded).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from workflows import definitions, operations, queries
from workflows.access import Capability
from workflows.api import filters, pagination, parsers, permissions
from workflows.api import serializers as s
from workflows.api.base import BODY, BODY_REQUIRED, PAGE, ApiView, errors, query, valid
from workflows.api.errors import PROBLEM_CONTENT_TYPE, problem
from workflows.engine import bounds
from workflows.exceptions import InstanceNotFound, InvalidPayload, TaskNotFound, Violation

# The longest ``?await`` honoured, in seconds (the parameter is validated against
# serializers.MAX_AWAIT_SECONDS; this cap is what the wait uses).
WAIT_CAP_SECONDS: float = s.MAX_AWAIT_SECONDS


# --- OpenAPI helpers -------------------------------------------------------------------------

RETRY_AFTER = OpenApiParameter(
    "Retry-After",
    OpenApiTypes.INT,
    OpenApiParameter.HEADER,
    response=[429, 503],
    description="seconds to wait before retrying",
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {
        "type": "string",
        "minLength": 1,
        "maxLength": bounds.KEY_MAX_CHARS,
        "pattern": bounds.HEADER_KEY_PATTERN,
    },
    OpenApiParameter.HEADER,
    description="a repeat with the same key and body answers the first recording; another body with the same "
    "key is refused with IDEMPOTENCY_CONFLICT. Keys are the caller's own: another user's same key is another "
    "key. 1 to 255 printable characters (a control character is 400 INVALID_PAYLOAD)",
    examples=[OpenApiExample("a key", value="order-1001-start")],
)
AWAIT = OpenApiParameter(
    "await",
    {"type": "number", "minimum": 0, "maximum": s.MAX_AWAIT_SECONDS},
    OpenApiParameter.QUERY,
    description="wait up to this many seconds for the executor to go idle on the run, then answer 200 with the run",
)
RUN_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the run's id")
TASK_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the task's id")
SCOPE = OpenApiParameter(
    "scope",
    {**s.SCOPE_SCHEMA, "pattern": s.SCOPE_IN_PATH_PATTERN},
    OpenApiParameter.PATH,
    description="the definition scope, e.g. default",
)
DEFINITION_ID = OpenApiParameter(
    "definition_id", s.DEFINITION_ID_SCHEMA, OpenApiParameter.PATH, description="the definition id"
)
VERSION = OpenApiParameter("version", s.VERSION_SCHEMA, OpenApiParameter.PATH, description="the version")
# RFC 9110 §8.8.3: an entity tag, optionally weak; its opaque part is any of these characters
_ENTITY_TAG = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*')
# the If-Match header if_match reads: "*", or entity tags separated by commas (a comma inside a
# tag would split it, so the schema's tags hold none)
_TAG = r'[ \t]*(W/)?"[\x21\x23-\x2b\x2d-\x7e]*"[ \t]*'
IF_MATCH_PATTERN = rf"^([ \t]*\*[ \t]*|{_TAG}(,{_TAG})*)$"
IF_MATCH = OpenApiParameter(
    "If-Match",
    {"type": "string", "pattern": IF_MATCH_PATTERN},
    OpenApiParameter.HEADER,
    description='the run\'s ETag as read (`"<state_version>.<sequence>"`, a list of them, or `*`): the write is '
    "made only while the run is as read (compared under the run's lock, and the write itself changes the tag: "
    "of concurrent writers holding one tag one wins), otherwise 412 STATE_VERSION_MISMATCH and nothing is "
    "recorded; without it the write is unconditional",
    examples=[OpenApiExample("the ETag read", value='"3.7"')],
)
ETAG = OpenApiParameter(
    "ETag",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    response=[200],
    description='`"<state_version>.<sequence>"` (strong): send it back in If-Match to condition a write on the run '
    "as read",
)
RUN_LOCATION = OpenApiParameter(
    "Location", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[202], description="the run"
)
E412 = "STATE_VERSION_MISMATCH: If-Match names another state version than the run's; nothing was recorded"


def recorded_responses(*codes: int, **text: str) -> dict[Any, Any]:
    return {
        202: OpenApiResponse(s.CommandOut, description="the command was recorded; the executor runs it"),
        200: OpenApiResponse(s.RunOut, description="with ?await: the run after the executor went idle on it"),
        **errors(*BODY, 404, 409, 422, 503, *codes, **text),
    }


# --- helpers ---------------------------------------------------------------------------------


def run_id_of(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InstanceNotFound("run not found") from None


def task_id_of(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise TaskNotFound("task not found") from None


def idempotency_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header, checked before any database work: 1 to 255 characters
    without control characters (400 INVALID_PAYLOAD otherwise, the key not repeated). Keys
    are the caller's own: the engine scopes them by the authenticated actor."""
    key = request.headers.get("Idempotency-Key")
    bounds.check_key(key, "the Idempotency-Key header")
    return key


def run_etag(run: dict[str, Any]) -> str:
    """The run's ETag, strong: ``"<state_version>.<next command sequence>"``. A strong tag,
    because If-Match compares strongly (RFC 9110 §13.1.1: a weak tag never matches there) and
    conditioning a write on the run is what it is for. Every write a tag admits records a
    command and so advances the sequence: the tag is a compare-and-set, one write wins and
    every other holding the same tag is 412 (a tag of the state version alone let ten
    concurrent writers through, issue #40). It names the run, not the bytes of the answer, so
    the API answers no 304."""
    return f'"{run["state_version"]}.{run["next_seq"]}"'


_RUN_TAG = re.compile(r"([0-9]{1,10})\.([0-9]{1,10})")


def if_match(request: Request) -> operations.ExpectedVersion:
    """The run tags ``If-Match`` admits, as (state version, next sequence): None without the
    header or with ``*`` (any current run); weak tags and tags that are no run's ETag (a bare
    state version included) never match (an empty set: 412). A header that is no list of
    entity tags is 400 INVALID_PAYLOAD, the value not repeated."""
    header = request.headers.get("If-Match")
    if header is None or header.strip() == "*":
        return None
    versions: set[tuple[int, int]] = set()
    for item in header.split(","):
        tag = _ENTITY_TAG.fullmatch(item)
        if tag is None:
            message = 'a list of entity tags ("<state_version>.<sequence>") or *'
            raise InvalidPayload(
                "the If-Match header is not a list of entity tags",
                violations=[Violation(pointer="", type="header", message=message)],
            )
        weak, opaque = tag.groups()
        found = None if weak else _RUN_TAG.fullmatch(opaque)
        if found is not None:
            versions.add((int(found.group(1)), int(found.group(2))))
    return versions


def await_seconds(request: Request) -> float | None:
    """Validated before anything is recorded: a bad ``await`` must not leave a command behind."""
    return valid(s.AwaitQuery, request.query_params).get("await_")


def awaited(run_id: str, wait: float) -> Response:
    """``?await``: 200 with the run once the executor went idle on it (or the wait ran out)."""
    operations.await_idle(min(wait, WAIT_CAP_SECONDS), run_id=run_id)
    return Response(s.RunOut(queries.query(run_id=run_id)).data)


def recorded(recording: operations.Recorded, wait: float | None, *, location: bool = False) -> Response:
    if wait is not None:
        return awaited(recording.run_id, wait)
    headers = {"Location": reverse("switchyard_api:run", args=[recording.run_id])} if location else None
    return Response(s.CommandOut(recording.as_dict()).data, status=status.HTTP_202_ACCEPTED, headers=headers)


@csrf_exempt  # nothing to protect, and a CSRF refusal would be Django's HTML page
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Anything under /api/ that matches no endpoint (paths end with '/')."""
    body = problem(404, "NOT_FOUND", "Not found", "no such endpoint (API paths end with '/')").data
    return JsonResponse(body, status=404, content_type=PROBLEM_CONTENT_TYPE)


# --- runs ------------------------------------------------------------------------------------


class RunsView(ApiView):
    read_permission = permissions.CanReadRuns
    pagination_class = pagination.RunCursor
    write_permission = permissions.CanStartRuns

    @extend_schema(
        operation_id="runs_list",
        tags=["runs"],
        summary="List runs",
        parameters=[*filters.parameters(filters.RunSearch), *PAGE],
        responses={200: s.RunOut(many=True), **errors(400, 404, e404="NOT_FOUND: an invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        runs = filters.RunSearch.search(request, queries.runs(waits=True))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(runs, request, view=self) or []
        return paginator.get_paginated_response(s.RunOut([queries.run_dict(r) for r in page], many=True).data)

    @extend_schema(
        operation_id="runs_start",
        tags=["runs"],
        summary="Start a run",
        request=s.StartRunInput,
        examples=[
            OpenApiExample(
                "start",
                request_only=True,
                value={
                    "definition_id": "purchase-approval",
                    "business_key": "PO-1001",
                    "payload": {"number": "PO-1001", "total": 1200},
                },
            )
        ],
        parameters=[
            IDEMPOTENCY_KEY,
            AWAIT,
            RETRY_AFTER,
            RUN_LOCATION,
        ],
        responses=recorded_responses(
            e409="IDEMPOTENCY_CONFLICT, DEPRECATED, INVALID_TRANSITION (retired)",
            e422="NO_CURRENT_VERSION, VERSION_NOT_RUNNABLE",
            e404="DEFINITION_MISSING",
        ),
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key(request)
        wait = await_seconds(request)
        body = valid(s.StartRunInput, request.data)
        recording = operations.start(
            definition_id=body["definition_id"],
            version=body.get("version"),
            scope=body.get("scope"),
            business_key=body.get("business_key") or "",
            payload=body.get("payload"),
            idempotency_key=key,
            actor=request.user,
        )
        return recorded(recording, wait, location=True)


class RunView(ApiView):
    read_permission = permissions.CanReadRuns

    @extend_schema(
        operation_id="runs_retrieve",
        tags=["runs"],
        summary="A run",
        parameters=[RUN_ID, ETAG],
        responses={200: s.RunOut, **errors(404, e404="INSTANCE_NOT_FOUND")},
    )
    def get(self, request: Request, id: str) -> Response:
        run = queries.query(run_id=run_id_of(id))
        return Response(s.RunOut(run).data, headers={"ETag": run_etag(run)})


class RunHistoryView(ApiView):
    read_permission = permissions.CanReadRuns
    pagination_class = pagination.HistoryCursor

    @extend_schema(
        operation_id="runs_history",
        tags=["runs"],
        summary="A run's history and decision log",
        parameters=[RUN_ID, *PAGE],
        responses={
            200: s.HistoryEntryOut(many=True),
            **errors(404, e404="INSTANCE_NOT_FOUND, or NOT_FOUND for an invalid cursor"),
        },
    )
    def get(self, request: Request, id: str) -> Response:
        filters.refuse_unknown(request, ())
        run_id = run_id_of(id)
        queries.query(run_id=run_id)  # INSTANCE_NOT_FOUND before an empty page
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(queries.history(run_id=run_id), request, view=self) or []
        return paginator.get_paginated_response(s.HistoryEntryOut([s.history_dict(e) for e in page], many=True).data)


class RunSignalView(ApiView):
    write_permission = permissions.CanSignalRuns

    @extend_schema(
        operation_id="runs_signal",
        tags=["runs"],
        summary="Send a signal to a run",
        request=s.SignalInput,
        examples=[OpenApiExample("signal", request_only=True, value={"name": "paid", "payload": {"amount": 1200}})],
        parameters=[RUN_ID, IDEMPOTENCY_KEY, IF_MATCH, AWAIT, RETRY_AFTER],
        responses=recorded_responses(
            412,
            e404="INSTANCE_NOT_FOUND",
            e409="SIGNAL_REJECTED (ended run, undeclared name), IDEMPOTENCY_CONFLICT",
            e412=E412,
            e429="SIGNAL_LIMIT: too many open signals for this run, or THROTTLED",
        ),
    )
    def post(self, request: Request, id: str) -> Response:
        key = idempotency_key(request)
        expected = if_match(request)
        run_id = run_id_of(id)
        wait = await_seconds(request)
        body = valid(s.SignalInput, request.data)
        recording = operations.signal(
            run_id=run_id,
            name=body["name"],
            payload=body.get("payload"),
            branch=body.get("branch") or None,
            idempotency_key=key,
            actor=request.user,
            expected_state_version=expected,
        )
        return recorded(recording, wait)


class RunCancelView(ApiView):
    write_permission = permissions.CanCancelRuns

    @extend_schema(
        operation_id="runs_cancel",
        tags=["runs"],
        summary="Cancel a run (synchronously)",
        request=s.CancelInput,
        examples=[OpenApiExample("cancel", request_only=True, value={"reason": "ordered twice"})],
        parameters=[RUN_ID, IF_MATCH, RETRY_AFTER],
        responses={
            200: OpenApiResponse(s.RunOut, description="the cancelled run"),
            **errors(
                *BODY,
                404,
                409,
                412,
                503,
                e404="INSTANCE_NOT_FOUND",
                e409="SIGNAL_REJECTED: already ended",
                e412=E412,
            ),
        },
    )
    def post(self, request: Request, id: str) -> Response:
        expected = if_match(request)
        run_id = run_id_of(id)
        body = valid(s.CancelInput, request.data)
        operations.cancel(
            run_id=run_id, reason=body.get("reason") or "", actor=request.user, expected_state_version=expected
        )
        return Response(s.RunOut(queries.query(run_id=run_id)).data)


class RunRetryView(ApiView):
    write_permission = permissions.CanRetryRuns

    @extend_schema(
        operation_id="runs_retry",
        tags=["runs"],
        summary="Retry a failed run or its dead-lettered commands",
        request=None,
        parameters=[RUN_ID, IF_MATCH, AWAIT, RETRY_AFTER],
        responses=recorded_responses(
            412, e404="INSTANCE_NOT_FOUND", e409="SIGNAL_REJECTED: ended, or nothing to retry", e412=E412
        ),
    )
    def post(self, request: Request, id: str) -> Response:
        expected = if_match(request)
        run_id = run_id_of(id)
        wait = await_seconds(request)
        return recorded(operations.retry(run_id=run_id, actor=request.user, expected_state_version=expected), wait)


class RunMigrateView(ApiView):
    write_permission = permissions.CanMigrateRuns

    @extend_schema(
        operation_id="runs_migrate",
        tags=["runs"],
        summary="Migrate a run to another revision",
        request=s.MigrateInput,
        parameters=[RUN_ID, IF_MATCH, AWAIT, RETRY_AFTER],
        responses=recorded_responses(
            412,
            e404="INSTANCE_NOT_FOUND",
            e409="MIGRATION_ILLEGAL_STATE: ended, scope not admitted, another migration pending",
            e412=E412,
        ),
    )
    def post(self, request: Request, id: str) -> Response:
        expected = if_match(request)
        run_id = run_id_of(id)
        wait = await_seconds(request)
        body = valid(s.MigrateInput, request.data)
        recording = operations.migrate(
            run_id=run_id,
            target_version=body["target_version"],
            target_scope=body.get("target_scope"),
            target_step=body.get("target_step"),
            action=body["action"],
            actor=request.user,
            expected_state_version=expected,
        )
        return recorded(recording, wait)


# --- signals by business key -------------------------------------------------------------------

KEYED_WAIT = OpenApiResponse(s.RunOut, description="with ?await: the run after the executor went idle on it")


def keyed(answer: operations.KeyedSignal, wait: float | None) -> Response:
    """202 with the keyed answer and the run's Location (or, with ?await, 200 with the run)."""
    if wait is not None:
        return awaited(answer.run_id, wait)
    headers = {"Location": reverse("switchyard_api:run", args=[answer.run_id])}
    return Response(s.KeyedSignalOut(answer.as_dict()).data, status=status.HTTP_202_ACCEPTED, headers=headers)


class SignalByKeyView(ApiView):
    write_permission = permissions.CanSignalRuns

    @extend_schema(
        operation_id="runs_signal_by_key",
        tags=["runs"],
        summary="Send a signal to the open run with a business key",
        description="Addresses the one run of `definition_id` started in `scope` (default `default`) with "
        "`business_key` that has not ended. Keys are not unique among runs: two open runs with the key are "
        "refused (409 BUSINESS_KEY_AMBIGUOUS); address the run by its id then.",
        request=s.SignalByKeyInput,
        parameters=[IDEMPOTENCY_KEY, AWAIT, RETRY_AFTER, RUN_LOCATION],
        responses={
            202: OpenApiResponse(s.KeyedSignalOut, description="the signal was recorded (started is false)"),
            200: KEYED_WAIT,
            **errors(
                *BODY,
                404,
                409,
                422,
                503,
                e404="INSTANCE_NOT_FOUND: no open run has the business key",
                e409="BUSINESS_KEY_AMBIGUOUS, SIGNAL_REJECTED (undeclared name), IDEMPOTENCY_CONFLICT",
                e429="SIGNAL_LIMIT: too many open signals for this run, or THROTTLED",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key(request)
        wait = await_seconds(request)
        body = valid(s.SignalByKeyInput, request.data)
        answer = operations.signal_by_key(
            definition_id=body["definition_id"],
            scope=body.get("scope"),
            business_key=body["business_key"],
            name=body["name"],
            payload=body.get("payload"),
            branch=body.get("branch") or None,
            idempotency_key=key,
            actor=request.user,
        )
        return keyed(answer, wait)


class SignalWithStartView(ApiView):
    write_permission = permissions.CanSignalRuns

    def get_permissions(self) -> list[BasePermission]:
        # it may start a run and signals one: both capabilities, whatever the outcome
        return [*super().get_permissions(), permissions.CanStartRuns()]

    @extend_schema(
        operation_id="runs_signal_with_start",
        tags=["runs"],
        summary="Signal the open run with a business key, starting it first when there is none",
        description="One transaction: when a run of `definition_id` started in `scope` with `business_key` is "
        "open, it is signalled; otherwise a run is started (`version`, `start_payload`, as `POST /api/v1/runs/`) "
        "and signalled (the signal is queued behind its START). Concurrent calls for one key start one run. "
        "A repeat with the same `Idempotency-Key` and body answers the first answer and starts nothing.",
        request=s.SignalWithStartInput,
        parameters=[
            IDEMPOTENCY_KEY,
            AWAIT,
            RETRY_AFTER,
            RUN_LOCATION,
        ],
        responses={
            202: OpenApiResponse(s.KeyedSignalOut, description="recorded: started says whether a run was started"),
            200: KEYED_WAIT,
            **errors(
                *BODY,
                404,
                409,
                422,
                503,
                e404="DEFINITION_MISSING",
                e409="BUSINESS_KEY_AMBIGUOUS, SIGNAL_REJECTED, IDEMPOTENCY_CONFLICT, DEPRECATED, "
                "INVALID_TRANSITION (retired)",
                e422="NO_CURRENT_VERSION, VERSION_NOT_RUNNABLE",
                e429="SIGNAL_LIMIT: too many open signals for this run, or THROTTLED",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key(request)
        wait = await_seconds(request)
        body = valid(s.SignalWithStartInput, request.data)
        answer = operations.signal_with_start(
            definition_id=body["definition_id"],
            version=body.get("version"),
            scope=body.get("scope"),
            business_key=body["business_key"],
            start_payload=body.get("start_payload"),
            name=body["name"],
            payload=body.get("payload"),
            branch=body.get("branch") or None,
            idempotency_key=key,
            actor=request.user,
        )
        return keyed(answer, wait)


# --- tasks -----------------------------------------------------------------------------------


class TasksView(ApiView):
    pagination_class = pagination.TaskCursor

    @extend_schema(
        operation_id="tasks_list",
        tags=["tasks"],
        summary="My tasks (open ones unless ?status= says otherwise)",
        parameters=[*filters.parameters(filters.TaskSearch), *PAGE],
        responses={200: s.TaskOut(many=True), **errors(400, 404, e404="NOT_FOUND: an invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        return self.page(request, queries.tasks_for(request.user, include_closed=True))

    def page(self, request: Request, tasks: Any) -> Response:
        paginator = self.pagination_class()
        found = filters.TaskSearch.search(request, tasks)
        page = paginator.paginate_queryset(found, request, view=self) or []
        return paginator.get_paginated_response(s.TaskOut([s.task_dict(t) for t in page], many=True).data)


class AllTasksView(TasksView):
    read_permission = permissions.requires(Capability.OPERATE)

    @extend_schema(
        operation_id="tasks_all",
        tags=["tasks"],
        summary="Every task, whoever it is assigned to (operators; open ones unless ?status= says otherwise)",
        parameters=[*filters.parameters(filters.TaskSearch), *PAGE],
        responses={200: s.TaskOut(many=True), **errors(400, 404, e404="NOT_FOUND: an invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        return self.page(request, queries.all_tasks())


class TaskView(ApiView):
    @extend_schema(
        operation_id="tasks_retrieve",
        tags=["tasks"],
        summary="A task I may act on",
        parameters=[TASK_ID],
        responses={200: s.TaskOut, **errors(404, e404="TASK_NOT_FOUND")},
    )
    def get(self, request: Request, id: str) -> Response:
        task = queries.task_for(request.user, task_id=task_id_of(id))
        return Response(s.TaskOut(s.task_dict(task)).data)


class TaskCompleteView(ApiView):
    @extend_schema(
        operation_id="tasks_complete",
        tags=["tasks"],
        summary="Complete a task with a decision",
        request=s.CompleteTaskInput,
        examples=[
            OpenApiExample("approve", request_only=True, value={"decision": "approve", "payload": {"comment": "ok"}})
        ],
        parameters=[TASK_ID, IDEMPOTENCY_KEY, AWAIT, RETRY_AFTER],
        responses=recorded_responses(
            e404="TASK_NOT_FOUND: no such task, or one the caller cannot act on",
            e409="TASK_NOT_WAITING (not open, reassigned, stale subject version), IDEMPOTENCY_CONFLICT",
        ),
    )
    def post(self, request: Request, id: str) -> Response:
        key = idempotency_key(request)
        task = queries.task_for(request.user, task_id=task_id_of(id))
        wait = await_seconds(request)
        body = valid(s.CompleteTaskInput, request.data)
        # The caller was allowed to act because of the task's assignment as read above: record
        # the completion only while that assignment still holds (a reassignment in between is
        # refused with TASK_NOT_WAITING instead of completing someone else's task).
        expected = body.get("expected_assignment") or {"mode": task.assignment_mode, "value": task.assignment_value}
        recording = operations.complete_task(
            task_id=task.id,
            decision=body["decision"],
            payload=body.get("payload"),
            expected_assignment=expected,
            subject_version=body.get("subject_version"),
            idempotency_key=key,
            actor=request.user,
        )
        return recorded(recording, wait)


class TaskReassignView(ApiView):
    @extend_schema(
        operation_id="tasks_reassign",
        tags=["tasks"],
        summary="Reassign a task",
        request={"application/json": s.REASSIGN_SCHEMA},
        extensions=BODY_REQUIRED,
        parameters=[TASK_ID, RETRY_AFTER],
        responses={
            200: OpenApiResponse(s.TaskOut, description="the task with its new assignment"),
            **errors(
                *BODY,
                404,
                409,
                422,
                503,
                e404="TASK_NOT_FOUND",
                e409="TASK_NOT_WAITING",
                e422="ASSIGNEE_NOT_FOUND: no active user or existing group has that name",
            ),
        },
    )
    def post(self, request: Request, id: str) -> Response:
        task = queries.task_for(request.user, task_id=task_id_of(id))
        body = valid(s.ReassignTaskInput, request.data)
        operations.reassign_task(task_id=task.id, mode=body["mode"], value=body["value"], actor=request.user)
        task.refresh_from_db()
        return Response(s.TaskOut(s.task_dict(task)).data)


# --- definitions -----------------------------------------------------------------------------


def definition_dict(record: Any) -> dict[str, Any]:
    return {k: getattr(record, k) for k in ("scope", "definition_id", "version", "status", "plan_hash")}


class DefinitionsView(ApiView):
    read_permission = permissions.CanManageDefinitions
    write_permission = permissions.CanManageDefinitions
    pagination_class = pagination.ListCursor
    parser_classes = [
        parsers.BoundedJSONParser,
        parsers.YAMLDocumentParser,
        parsers.XYAMLDocumentParser,
        parsers.TextYAMLDocumentParser,
    ]

    @extend_schema(
        operation_id="definitions_list",
        tags=["definitions"],
        summary="Stored definition versions",
        parameters=[s.DefinitionFilters, *PAGE],
        responses={200: s.DefinitionOut(many=True), **errors(400, 404, e404="NOT_FOUND: invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        records = definitions.list(**query(request, s.DefinitionFilters))
        paginator = self.pagination_class()
        page = paginator.paginate_list(records, request)
        return paginator.get_paginated_response(s.DefinitionOut([definition_dict(r) for r in page], many=True).data)

    @extend_schema(
        operation_id="definitions_load",
        tags=["definitions"],
        summary="Load a candidate definition",
        description="JSON `{scope, format, text}`, or the YAML document itself as the body "
        "(`Content-Type: application/yaml`, scope in `?scope=`).",
        request={"application/json": s.LoadDefinitionInput, "application/yaml": OpenApiTypes.STR},
        extensions=BODY_REQUIRED,
        parameters=[OpenApiParameter("scope", s.SCOPE_SCHEMA, description="with a YAML body: the scope")],
        responses={
            201: s.DefinitionOut,
            **errors(
                *BODY,
                409,
                422,
                e409="CONTRACT_MISMATCH, VERSION_EXISTS, NODE_ROLE",
                e422="DEFINITION_INVALID, UNKNOWN_TYPE_NAME",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = request.data
        if isinstance(data, dict) and request.content_type.startswith(
            ("application/yaml", "application/x-yaml", "text/yaml")
        ):
            data = {**data, "scope": request.query_params.get("scope", "default")}
        body = valid(s.LoadDefinitionInput, data)
        record = definitions.load(
            scope=body["scope"], text=body["text"], format=body["format"], metadata=body.get("metadata")
        )
        return Response(s.DefinitionOut(definition_dict(record)).data, status=status.HTTP_201_CREATED)


class _DefinitionLifecycleView(ApiView):
    write_permission = permissions.CanManageDefinitions
    operation = ""

    def post(self, request: Request, scope: str, definition_id: str, version: int) -> Response:
        change = getattr(definitions, self.operation)
        record = change(scope=scope, definition_id=definition_id, version=version)
        return Response(s.DefinitionOut(definition_dict(record)).data)


def _lifecycle(operation: str, summary: str, conflicts: str) -> type[_DefinitionLifecycleView]:
    schema = extend_schema(
        operation_id=f"definitions_{operation}",
        tags=["definitions"],
        summary=summary,
        request=None,
        parameters=[SCOPE, DEFINITION_ID, VERSION],
        responses={
            200: s.DefinitionOut,
            **errors(
                400,
                404,
                409,
                422,
                e404="DEFINITION_MISSING",
                e409=conflicts,
                e422="DEFINITION_INVALID: the stored text no longer compiles",
            ),
        },
    )

    def post(
        self: _DefinitionLifecycleView, request: Request, scope: str, definition_id: str, version: int
    ) -> Response:
        return _DefinitionLifecycleView.post(self, request, scope, definition_id, version)

    return type(
        f"Definition{operation.title()}View",
        (_DefinitionLifecycleView,),
        {"operation": operation, "post": schema(post)},
    )


DefinitionPublishView = _lifecycle(
    "publish", "Publish a candidate (CANDIDATE → AVAILABLE)", "INVALID_TRANSITION, DRIFT, LOADER_MISSING, NODE_ROLE"
)
DefinitionDeprecateView = _lifecycle(
    "deprecate",
    "Deprecate a version (AVAILABLE → DEPRECATED)",
    "INVALID_TRANSITION (other status, or the default scope's current version)",
)
DefinitionRetireView = _lifecycle(
    "retire", "Retire a version (CANDIDATE/DEPRECATED → RETIRED)", "PINNED_INSTANCES, INVALID_TRANSITION"
)
DefinitionReinstateView = _lifecycle(
    "reinstate",
    "Reinstate a version (RETIRED/DEPRECATED → AVAILABLE)",
    "INVALID_TRANSITION, DRIFT, LOADER_MISSING, NODE_ROLE",
)


# --- activations -----------------------------------------------------------------------------


class ActivationsView(ApiView):
    read_permission = permissions.CanManageDefinitions
    pagination_class = pagination.ListCursor

    @extend_schema(
        operation_id="activations_list",
        tags=["activations"],
        summary="Activation records",
        parameters=[s.ActivationFilters, *PAGE],
        responses={200: s.ActivationOut(many=True), **errors(400, 404, e404="NOT_FOUND: invalid cursor")},
    )
    def get(self, request: Request) -> Response:
        records = definitions.activations(scope=query(request, s.ActivationFilters).get("scope"))
        paginator = self.pagination_class()
        page = paginator.paginate_list(records, request)
        return paginator.get_paginated_response(s.ActivationOut([r.as_dict() for r in page], many=True).data)


class ActivationView(ApiView):
    write_permission = permissions.CanManageDefinitions

    @extend_schema(
        operation_id="activations_activate",
        tags=["activations"],
        summary="Choose the version a start without a version runs in a scope",
        request=s.ActivateInput,
        parameters=[SCOPE, DEFINITION_ID],
        responses={
            200: s.ActivationOut,
            **errors(*BODY, 409, e409="INVALID_TRANSITION (target not AVAILABLE), CONTRACT_MISMATCH"),
        },
    )
    def put(self, request: Request, scope: str, definition_id: str) -> Response:
        body = valid(s.ActivateInput, request.data)
        record = definitions.activate(
            scope=scope,
            definition_id=definition_id,
            version=body["version"],
            target_scope=body.get("target_scope"),
            updated_by=request.user.get_username(),
        )
        return Response(s.ActivationOut(record.as_dict()).data)

    @extend_schema(
        operation_id="activations_deactivate",
        tags=["activations"],
        summary="Follow the default scope again, or (for the default scope) deactivate",
        request=None,
        parameters=[SCOPE, DEFINITION_ID],
        responses={
            204: OpenApiResponse(description="the record is gone (an absent record is accepted)"),
            **errors(400),
        },
    )
    def delete(self, request: Request, scope: str, definition_id: str) -> Response:
        if scope == "default":
            definitions.deactivate_default(definition_id=definition_id)
        else:
            definitions.follow(scope=scope, definition_id=definition_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
