"""Reads: runs, tasks and history as the API and the pages show them (no engine import needed
by callers). Identity checks for tasks live here so every surface applies the same rule."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from workflows.exceptions import InstanceNotFound, TaskNotFound
from workflows.models import LIVE_STATUSES, Command, DefinitionVersion, HistoryEntry, Park, Run, Task, Timer


def run_dict(run: Run) -> dict[str, Any]:
    waits = []
    for park in run.parks.filter(left_at__isnull=True).order_by("since"):
        waits.append({"kind": park.kind, "step": park.node, "branch": park.branch_id or None, "since": park.since})
    return {
        "id": str(run.id),
        "definition_id": run.definition_id,
        "version": run.version,
        "scope": run.scope,
        "start_scope": run.start_scope,
        "status": run.status,
        "current_step": run.current_step,
        "state": run.state,
        "state_version": run.state_version,
        "business_key": run.business_key,
        "subject": run.subject,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "failure": {"code": run.failure_code, "message": run.failure_message} if run.failure_code else None,
        "waits": waits,
    }


def query(*, run_id: Any) -> dict[str, Any]:
    """The run as the API shows it. Refuses INSTANCE_NOT_FOUND."""
    try:
        run = Run.objects.get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError):
        raise InstanceNotFound("run not found") from None
    return run_dict(run)


def runs() -> QuerySet[Run]:
    return Run.objects.all()


def history(*, run_id: Any) -> QuerySet[HistoryEntry]:
    return HistoryEntry.objects.filter(run_id=run_id).order_by("seq")


def commands(*, run_id: Any) -> QuerySet[Command]:
    return Command.objects.filter(run_id=run_id).order_by("seq")


def open_parks(*, run_id: Any) -> QuerySet[Park]:
    return Park.objects.filter(run_id=run_id, left_at__isnull=True)


def tasks_for(user: Any, *, include_closed: bool = False) -> QuerySet[Task]:
    """The tasks a user may see and act on: assigned to them or to one of their groups."""
    qs = Task.objects.select_related("run")
    if not include_closed:
        qs = qs.filter(status__in=["OPEN", "COMPLETING"])
    if not getattr(user, "is_authenticated", False):
        return qs.none()
    groups = list(user.groups.values_list("name", flat=True))
    return qs.filter(
        Q(assignment_mode="user", assignment_value=user.get_username())
        | Q(assignment_mode="group", assignment_value__in=groups)
    )


def can_act_on_task(user: Any, task: Task) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if task.assignment_mode == "user" and task.assignment_value == user.get_username():
        return True
    if task.assignment_mode == "group" and user.groups.filter(name=task.assignment_value).exists():
        return True
    from workflows import access

    return access.has(user, access.Capability.ACT_ON_ANY_TASK)


def task_for(user: Any, *, task_id: Any) -> Task:
    """A task the user may act on; TASK_NOT_FOUND otherwise (no hint that it exists)."""
    try:
        task = Task.objects.select_related("run").get(pk=task_id)
    except (Task.DoesNotExist, ValueError, TypeError):
        raise TaskNotFound("task not found") from None
    if not can_act_on_task(user, task):
        raise TaskNotFound("task not found")
    return task


def database_now() -> Any:
    """The database clock. Due times are written on it, so overdue marks compare with it,
    never with the web node's clock."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def decision_schemas_as_written(task: Task) -> dict[str, Any]:
    """The decisions' payload schemas of a task as its definition wrote them (key order kept),
    for laying out forms. Empty when the pinned plan cannot be read here; the task's own
    decision snapshot stays the schema that completions are checked against."""
    from workflows.definitions import cache
    from workflows.definitions.plan import HumanTaskStep
    from workflows.exceptions import WorkflowError

    run = task.run
    try:
        plan = cache.get_plan(
            scope=run.scope, definition_id=run.definition_id, version=run.version, expected_hash=run.plan_hash
        )
    except WorkflowError:
        return {}
    step = plan.steps.get(task.step)
    if not isinstance(step, HumanTaskStep):
        return {}
    return {d.name: d.payload_schema for d in step.decisions if d.payload_schema}


# --- the run viewer ------------------------------------------------------------------------------

HISTORY_PAGE = 50
# timeline filters: a name the page offers -> the entry types it shows (a trailing * is a prefix)
HISTORY_FILTERS: dict[str, tuple[str, ...]] = {
    "decisions": ("DECISION", "STATE_BASELINE"),
    "commands": ("COMMAND_*", "DEAD_LETTERS_REOFFERED"),
    "signals": ("SIGNAL_*",),
    "tasks": ("TASK_*",),
    "timers": ("TIMER_*", "TIMEOUT"),
    "effects": ("EMAIL_*", "EFFECT_*", "SERVICE_*", "INTENT_*"),
    "lifecycle": ("WORKFLOW_*", "CANCELLED", "FAILED", "COMPENSATION_*", "MIGRAT*", "BRANCH_*", "JOIN_*", "CALL_*"),
}


def get_run(*, run_id: Any) -> Run:
    """The run row. Refuses INSTANCE_NOT_FOUND (also for a malformed id)."""
    try:
        return Run.objects.get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError, ValidationError):
        raise InstanceNotFound("run not found") from None


def _types_filter(name: str) -> Q:
    q = Q()
    for pattern in HISTORY_FILTERS[name]:
        q |= Q(type__startswith=pattern[:-1]) if pattern.endswith("*") else Q(type=pattern)
    return q


def history_page(
    *,
    run_id: Any,
    after: int | None = None,
    before: int | None = None,
    only: str | None = None,
    limit: int = HISTORY_PAGE,
    newest_first: bool = False,
) -> tuple[list[HistoryEntry], bool]:
    """One page of a run's history by keyset on ``seq`` (cheap at any depth: the (run, seq)
    index answers it without counting or skipping rows). Answers (entries, more after them).

    ``after``/``before`` are exclusive seq bounds; ``only`` names one of HISTORY_FILTERS.
    """
    qs = HistoryEntry.objects.filter(run_id=run_id)
    if only:
        qs = qs.filter(_types_filter(only))
    if after is not None:
        qs = qs.filter(seq__gt=after)
    if before is not None:
        qs = qs.filter(seq__lt=before)
    rows = list(qs.order_by("-seq" if newest_first else "seq")[: limit + 1])
    return rows[:limit], len(rows) > limit


def decision_change(*, run_id: Any, seq: int) -> dict[str, Any]:
    """A DECISION entry with the (logged, redacted) state before and after it and its patch,
    rebuilt from the latest STATE_BASELINE before it plus the patches in between.

    Answers ``{"entry", "before", "after", "patch", "complete"}``; ``complete`` is False when
    no baseline precedes the entry (the states cannot be rebuilt). A branch's local decision
    carries only its patch. Raises HistoryEntry.DoesNotExist for another entry.
    """
    from workflows.engine.history import replay

    entry = HistoryEntry.objects.get(run_id=run_id, seq=seq, type="DECISION")
    result: dict[str, Any] = {"entry": entry, "patch": entry.patch, "before": None, "after": None, "complete": False}
    if entry.branch_id:
        return result
    baseline = HistoryEntry.objects.filter(run_id=run_id, type="STATE_BASELINE", seq__lt=seq).order_by("-seq").first()
    if baseline is None:
        return result
    between: list[dict[str, Any]] = [
        dict(row)
        for row in HistoryEntry.objects.filter(run_id=run_id, type="DECISION", seq__gt=baseline.seq, seq__lt=seq)
        .exclude(patch__isnull=True)
        .order_by("seq")
        .values("type", "patch", "payload", "branch_id")
    ]
    start = {"type": "STATE_BASELINE", "patch": None, "payload": baseline.payload, "branch_id": ""}
    before = replay([start, *between])
    if entry.patch is None:
        # too large to log as a patch: the full state follows at once as a baseline
        following = HistoryEntry.objects.filter(run_id=run_id, seq=seq + 1, type="STATE_BASELINE").first()
        after = (following.payload or {}).get("state") if following is not None else None
    else:
        after = replay([start, *between, {"type": "DECISION", "patch": entry.patch, "payload": None, "branch_id": ""}])
    result.update(before=before, after=after, complete=True)
    return result


def path_taken(*, run_id: Any) -> tuple[list[str], set[tuple[str, str]]]:
    """The steps a run went through (first visit order) and the step-to-step moves it made,
    from its DECISION entries (per branch), computed in the database."""
    rows = db_rows(
        "SELECT prev, step, min(seq) AS first FROM (SELECT seq, step, lag(step) OVER (PARTITION BY branch_id "
        "ORDER BY seq) AS prev FROM workflow_history WHERE run_id = %s AND type = 'DECISION') moves "
        "GROUP BY prev, step ORDER BY first",
        [run_id],
    )
    visited: dict[str, None] = {}
    moves: set[tuple[str, str]] = set()
    for prev, step, _first in rows:
        if step:
            visited.setdefault(step, None)
        if prev and step and prev != step:
            moves.add((prev, step))
    return list(visited), moves


def db_rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def plan_of(run: Run) -> Any:
    """The plan a run is pinned to (for its picture), or None when it cannot be built here.
    A retired or withdrawn revision is still compiled from its stored text for viewing."""
    from workflows.definitions import cache
    from workflows.definitions.lifecycle import build_row
    from workflows.exceptions import VersionNotRunnable, WorkflowError

    try:
        return cache.get_plan(
            scope=run.scope, definition_id=run.definition_id, version=run.version, expected_hash=run.plan_hash
        )
    except VersionNotRunnable:
        row = DefinitionVersion.objects.filter(
            scope=run.scope, definition_id=run.definition_id, version=run.version
        ).first()
        if row is None:
            return None
        try:
            return build_row(row)
        except WorkflowError:
            return None
    except WorkflowError:
        return None


def run_commands(*, run_id: Any, limit: int = 200) -> list[Command]:
    """A run's queue, newest first (bounded: a long-lived run may hold many settled commands)."""
    return list(Command.objects.filter(run_id=run_id).order_by("-seq")[:limit])


def commands_by_id(ids: Any) -> dict[int, Command]:
    return {c.id: c for c in Command.objects.filter(id__in=[i for i in ids if i is not None])}


def run_parks(*, run_id: Any) -> list[Park]:
    return list(Park.objects.filter(run_id=run_id).order_by("-since", "-id")[:200])


def open_tasks(*, run_id: Any) -> list[Task]:
    return list(Task.objects.filter(run_id=run_id, status__in=["OPEN", "COMPLETING"]).order_by("created_at"))


def scheduled_timers(*, run_id: Any) -> list[Timer]:
    return list(Timer.objects.filter(run_id=run_id, status="SCHEDULED").order_by("fire_at"))


def called_runs(*, run_id: Any, live_only: bool = True, limit: int = 200) -> list[Run]:
    """The runs this run called, all the way down (breadth first, bounded)."""
    found: list[Run] = []
    frontier = [run_id]
    while frontier and len(found) < limit:
        qs = Run.objects.filter(parent_run_id__in=frontier).order_by("created_at")
        if live_only:
            qs = qs.filter(status__in=[*LIVE_STATUSES, "FAILED"])
        children = list(qs[: limit - len(found)])
        found.extend(children)
        frontier = [c.id for c in children]
    return found


def waiting_callers(*, run_id: Any, limit: int = 100) -> list[Run]:
    """The runs waiting on this one at a call (its caller, the caller's caller, ...), nearest
    first: cancelling a called run cancels them too (``teardown.cancel_with_callers``)."""
    found: list[Run] = []
    below = Run.objects.filter(pk=run_id).first()
    while below is not None and below.parent_run_id and len(found) < limit:
        caller = Run.objects.filter(pk=below.parent_run_id, status="WAITING").first()
        if caller is None:
            break
        wait = caller.wait or {}
        at_call = wait.get("kind") == "call" and str(wait.get("child")) == str(below.id)
        if not at_call and not caller.branches.filter(status="WAITING", wait__child=str(below.id)).exists():
            break
        found.append(caller)
        below = caller
    return found


def cancel_preview(*, run_id: Any) -> dict[str, Any]:
    """What cancelling a run would end: the runs waiting on it at a call (cancelled first), its
    open approvals, armed timers, called runs and the commands still queued (they settle
    CANCELLED)."""
    return {
        "callers": waiting_callers(run_id=run_id),
        "tasks": open_tasks(run_id=run_id),
        "timers": scheduled_timers(run_id=run_id),
        "called_runs": called_runs(run_id=run_id),
        "queued": Command.objects.filter(
            run_id=run_id, status__in=["PENDING", "DEFERRED", "CLAIMED", "PARKED", "DEAD"]
        ).count(),
    }


def started_by(*, run_id: Any) -> Command | None:
    """The START command of a run (its actor columns say who started it)."""
    return Command.objects.filter(run_id=run_id, kind="START").order_by("seq").first()


def viewable_state(run: Run) -> Any:
    """The run's current state as staff pages show it: the values at its definition's
    redacted pointers replaced, as in the history (a failing redactor hides it all)."""
    from workflows.engine import redaction

    try:
        pointers = redaction.pointers_of(run.definition_id, run.version)
    except redaction.RedactionFailed:
        return redaction.REDACTED
    return redaction.redact(run.state, pointers)


# --- migration of parked runs (the Migrate dialog and the bulk API) --------------------------


def migration_positions(*, scope: str, definition_id: str, version: int) -> list[Any]:
    """Where runs of one revision are parked: one row per (node, kind) with its count, from one
    GROUP BY over the open parks' partial index (never a row per run)."""
    from workflows.engine import migration

    return migration.positions(scope=scope, definition_id=definition_id, version=int(version))


def migration_positions_by_revision(*, scope: str, definition_id: str) -> dict[int, list[Any]]:
    """The positions of every revision of a definition in a scope, from one GROUP BY over the
    open parks' covering index: {version: [Position(node, kind, runs, oldest)]}."""
    from workflows.engine import migration

    return migration.positions_by_revision(scope=scope, definition_id=definition_id)


def parked_by_version(*, definition_id: str) -> dict[tuple[str, int], int]:
    """Parked runs per (scope, revision) of a definition, every revision included."""
    from workflows.engine import migration

    return migration.parked_by_version(definition_id=definition_id)


def parked_by_definition(*, definition_ids: Any = None) -> dict[tuple[str, str], int]:
    """Parked runs per (definition id, scope), every revision included."""
    from workflows.engine import migration

    return migration.parked_by_definition(definition_ids)


def runs_at_position(
    *,
    scope: str,
    definition_id: str,
    version: int,
    node: str,
    kind: str,
    search: str = "",
    offset: int = 0,
    limit: int = 25,
) -> tuple[list[dict[str, Any]], int]:
    """One page of the runs parked at a position (oldest first), searchable by business key."""
    from workflows.engine import migration

    return migration.runs_at(
        scope=scope,
        definition_id=definition_id,
        version=int(version),
        node=node,
        kind=kind,
        search=search,
        offset=offset,
        limit=limit,
    )


def migration_records(*, scope: str | None = None, definition_id: str | None = None) -> QuerySet[Any]:
    """Applied migration records, newest first (previews never applied are left out)."""
    from workflows.models import MigrationRecord

    qs = MigrationRecord.objects.filter(status__in=["APPLYING", "DONE"]).order_by("-created_at", "-id")
    if scope is not None:
        qs = qs.filter(scope=scope)
    if definition_id is not None:
        qs = qs.filter(definition_id=definition_id)
    return qs


def migration_record(*, record_id: Any) -> Any:
    """One migration record; MIGRATION_ILLEGAL_STATE when there is none."""
    from workflows.exceptions import MigrationIllegalState
    from workflows.models import MigrationRecord

    try:
        return MigrationRecord.objects.get(pk=int(record_id))
    except (MigrationRecord.DoesNotExist, ValueError, TypeError):
        raise MigrationIllegalState("migration record not found") from None


def migration_items(*, record_id: Any, status: str | None = None) -> QuerySet[Any]:
    """The runs of a migration record with their outcome, in the order they were frozen."""
    from workflows.models import MigrationItem

    qs = MigrationItem.objects.filter(record_id=record_id).select_related("run").order_by("id")
    if status:
        qs = qs.filter(status=status)
    return qs


def migration_row_facts(*, record_id: Any) -> list[dict[str, Any]]:
    """Per frozen row: approvals to withdraw (by assignee), timers to disarm, counts by status."""
    from workflows.engine import migration

    return migration.row_facts(record_id=int(record_id))


def assignee_names(*, mode: str, value: str, limit: int = 10) -> list[str]:
    """Who an assignment reaches (the users a new task notifies): the user, or the active
    members of the group (at most ``limit``)."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True)
    if mode == "user":
        users = users.filter(username=value)
    elif mode == "group":
        users = users.filter(groups__name=value)
    else:
        return []
    return list(users.order_by("username").values_list("username", flat=True)[:limit])


def migration_plan(*, scope: str, definition_id: str, version: int) -> Any:
    """The plan of a revision for the Migrate dialog (None when this node cannot build it)."""
    from workflows.engine import migration

    return migration.plan_of(scope, definition_id, int(version))


def migration_target_facts(*, scope: str, definition_id: str, version: int, node: str) -> dict[str, Any]:
    """What entering ``node`` of a revision fresh will do (assignee, title, due, timers)."""
    from workflows.engine import migration

    plan = migration.plan_of(scope, definition_id, int(version))
    return migration.describe_target(plan.steps.get(node) if plan is not None else None)


# --- record triggers (capture) -------------------------------------------------------------------


def current_trigger_plans() -> list[Any]:
    """The plans with a record ``trigger`` among the default scope's current versions.

    One read: the default scope's activation records joined with their AVAILABLE rows (a row
    whose text never says "trigger" cannot declare one and is not built); the plans come from
    the plan cache. A version that does not build is left out (and logged by the cache).
    """
    from django.db import connection

    from workflows.definitions import cache
    from workflows.exceptions import WorkflowError

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.scope, d.definition_id, d.version, d.plan_hash FROM workflow_activations a "
            "JOIN workflow_definitions d ON d.scope = a.target_scope AND d.definition_id = a.definition_id "
            "AND d.version = a.version WHERE a.scope = 'default' AND d.status = 'AVAILABLE' "
            "AND strpos(d.text, 'trigger') > 0 ORDER BY d.definition_id"
        )
        rows = cursor.fetchall()
    plans = []
    for scope, definition_id, version, plan_hash in rows:
        try:
            plan = cache.get_plan(scope=scope, definition_id=definition_id, version=version, expected_hash=plan_hash)
        except WorkflowError:
            continue
        if plan.trigger is not None:
            plans.append(plan)
    return plans


def subject_types() -> list[str]:
    """Every distinct run subject type, read by skipping through the subject index (one probe
    per type, however many runs there are)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE t(v) AS ("
            " (SELECT subject_type FROM workflow_runs WHERE subject_type > '' ORDER BY subject_type LIMIT 1)"
            " UNION ALL SELECT (SELECT subject_type FROM workflow_runs WHERE subject_type > t.v "
            " ORDER BY subject_type LIMIT 1) FROM t WHERE t.v IS NOT NULL"
            ") SELECT v FROM t WHERE v IS NOT NULL"
        )
        return [row[0] for row in cursor.fetchall()]


def live_runs_about(*, subject_types: tuple[str, ...] | list[str], subject_id: str) -> list[str]:
    """Ids of the runs about this record that have not ended (failed ones included: a retry
    would resume a run about a record that is gone), oldest first."""
    from workflows.models.runs import ENDED_STATUSES

    rows = Run.objects.filter(subject_type__in=list(subject_types), subject_id=subject_id).exclude(
        status__in=ENDED_STATUSES
    )
    return [str(pk) for pk in rows.order_by("created_at").values_list("id", flat=True)]


# --- operations: the dashboard, the stuck-run radar and the metrics gauges ----------------------
# Every age and "overdue" below is computed on the database clock (now()), never the web node's.

RADAR_LIMIT = 500


def _ops_dicts(sql: str, params: Any = None) -> list[dict[str, Any]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        names = [c.name for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def queue_health() -> dict[str, Any]:
    """The command queue at a glance, one statement over the unsettled/attention statuses only
    (settled commands are never counted, so the cost follows the backlog, not the history).

    ``pending`` is due now, ``scheduled`` is PENDING but not yet due (timers); ``oldest_pending_seconds``
    is how long the oldest due command has waited to run; ``expired_leases`` are claims whose
    holder stopped (the sweep returns them)."""
    return _ops_dicts(
        "SELECT count(*) FILTER (WHERE status = 'PENDING' AND available_at <= now()) AS pending, "
        "count(*) FILTER (WHERE status = 'PENDING' AND available_at > now()) AS scheduled, "
        "count(*) FILTER (WHERE status = 'DEFERRED') AS deferred, "
        "count(*) FILTER (WHERE status = 'CLAIMED') AS claimed, "
        "count(*) FILTER (WHERE status = 'CLAIMED' AND lease_until < now()) AS expired_leases, "
        "count(*) FILTER (WHERE status = 'PARKED') AS parked, "
        "count(*) FILTER (WHERE status = 'DEAD') AS dead, "
        "count(*) FILTER (WHERE status = 'OUTCOME_UNKNOWN') AS outcome_unknown, "
        "coalesce(EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE status = 'PENDING' "
        "AND available_at <= now())), 0)::float AS oldest_pending_seconds, now() AS at "
        "FROM workflow_commands WHERE status IN ('PENDING','DEFERRED','CLAIMED','PARKED','DEAD','OUTCOME_UNKNOWN')"
    )[0]


def runs_by_revision() -> list[dict[str, Any]]:
    """Runs per (definition, scope, revision, status), newest revision first (the pin index)."""
    return _ops_dicts(
        "SELECT definition_id, scope, version, max(plan_hash) AS plan_hash, status, count(*) AS runs "
        "FROM workflow_runs GROUP BY definition_id, scope, version, status "
        "ORDER BY definition_id, scope, version DESC, status"
    )


def parked_by_position() -> list[dict[str, Any]]:
    """Parked runs per position (revision + node), main path only — the count the Migrate
    dialog moves, so FAILED runs left out — from the partial index of open parks; with the
    oldest wait's age."""
    from workflows.engine.migration import OLDEST_AT_POSITION, counted_positions

    return _ops_dicts(
        "SELECT c.definition_id, c.scope, c.version, c.node, c.kind, c.runs, "
        f"EXTRACT(EPOCH FROM now() - {OLDEST_AT_POSITION})::float AS oldest_seconds FROM "
        + counted_positions("true", "true")
        + " ORDER BY c.definition_id, c.scope, c.version DESC, c.node"
    )


def settled_per_minute(*, minutes: int = 60) -> list[dict[str, Any]]:
    """Commands settled per minute over the last ``minutes`` (every minute present, zeros
    included), split into ``failed`` (FAILED) and ``settled`` (all)."""
    minutes = max(1, min(int(minutes), 24 * 60))
    return _ops_dicts(
        "WITH s AS (SELECT date_trunc('minute', settled_at) AS minute, count(*) AS settled, "
        "count(*) FILTER (WHERE status = 'FAILED') AS failed FROM workflow_commands "
        "WHERE settled_at >= date_trunc('minute', now()) - make_interval(mins => %s) GROUP BY 1) "
        "SELECT g.minute, coalesce(s.settled, 0) AS settled, coalesce(s.failed, 0) AS failed "
        "FROM generate_series(date_trunc('minute', now()) - make_interval(mins => %s), date_trunc('minute', now()), "
        "interval '1 minute') AS g(minute) LEFT JOIN s ON s.minute = g.minute ORDER BY g.minute",
        [minutes - 1, minutes - 1],
    )


def revision_plan(*, scope: str, definition_id: str, version: int, plan_hash: str) -> Any:
    """The plan of a revision for its picture (None when it cannot be built here)."""
    from workflows.definitions import cache
    from workflows.exceptions import WorkflowError

    try:
        return cache.get_plan(scope=scope, definition_id=definition_id, version=version, expected_hash=plan_hash)
    except WorkflowError:
        return None


_RUN_COLUMNS = (
    "r.id AS run_id, r.definition_id, r.scope, r.version, r.status AS run_status, r.current_step, "
    "r.business_key, r.state_version, r.history_seq"
)


def stuck_parks(
    *,
    percentile: float = 0.95,
    window_days: int = 30,
    floor_seconds: float = 3600,
    overrides: dict[str, float] | None = None,
    limit: int = RADAR_LIMIT,
) -> list[dict[str, Any]]:
    """Open parks of live runs that have waited longer than their position's threshold.

    The threshold of a position (definition id + node, every revision and scope of it: a step
    keeps its id across revisions, and a new revision has no history yet) is, in this order:
    ``overrides["<definition id>:<node>"]``, ``overrides["<definition id>"]``, else the
    ``percentile`` of the waits at that position that closed in the last ``window_days``
    (left by a signal, decision, timer... — moved and cancelled waits are not waits that
    ended on their own), never below ``floor_seconds``. Most overdue (waited / threshold) first."""
    import json

    return _ops_dicts(
        "WITH stats AS (SELECT definition_id, node, count(*) AS samples, percentile_cont(%(pct)s) WITHIN GROUP "
        "(ORDER BY EXTRACT(EPOCH FROM left_at - since)) AS typical FROM workflow_parks "
        "WHERE left_at IS NOT NULL AND left_at >= now() - make_interval(days => %(days)s) "
        "AND left_how NOT IN ('moved','cancelled') GROUP BY definition_id, node), "
        "open AS (SELECT p.id AS park_id, p.node, p.kind, p.branch_id, p.since, "
        "EXTRACT(EPOCH FROM now() - p.since)::float AS waited_seconds, s.samples, s.typical, "
        "coalesce((%(overrides)s::jsonb ->> (p.definition_id || ':' || p.node))::float, "
        "(%(overrides)s::jsonb ->> p.definition_id)::float, greatest(coalesce(s.typical, 0), %(floor)s))::float "
        f"AS threshold_seconds, {_RUN_COLUMNS} "
        "FROM workflow_parks p JOIN workflow_runs r ON r.id = p.run_id "
        "LEFT JOIN stats s ON s.definition_id = p.definition_id AND s.node = p.node "
        "WHERE p.left_at IS NULL AND r.status IN ('PENDING','RUNNING','WAITING','COMPENSATING')) "
        "SELECT * FROM open WHERE waited_seconds > threshold_seconds "
        "ORDER BY waited_seconds / greatest(threshold_seconds, 1) DESC, park_id LIMIT %(limit)s",
        {
            "pct": float(percentile),
            "days": int(window_days),
            "floor": float(floor_seconds),
            "overrides": json.dumps({str(k): float(v) for k, v in (overrides or {}).items()}),
            "limit": int(limit),
        },
    )


def stuck_commands(*, stuck_after_seconds: float, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """Unsettled commands (PENDING, DEFERRED, CLAIMED) that have been due for longer than
    ``stuck_after_seconds`` — a timer due next week is not stuck, one due an hour ago is."""
    return _ops_dicts(
        "SELECT c.id AS command_id, c.kind, c.seq, c.status, c.attempts, c.deferral_count, c.last_error, "
        "c.recorded_at, EXTRACT(EPOCH FROM now() - greatest(c.available_at, c.recorded_at))::float AS stuck_seconds, "
        f"(c.status = 'CLAIMED' AND c.lease_until < now()) AS lease_expired, {_RUN_COLUMNS} "
        "FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
        "WHERE c.status IN ('PENDING','DEFERRED','CLAIMED') "
        "AND greatest(c.available_at, c.recorded_at) < now() - make_interval(secs => %s) "
        "ORDER BY greatest(c.available_at, c.recorded_at), c.id LIMIT %s",
        [float(stuck_after_seconds), int(limit)],
    )


def commands_in_status(*, status: str, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """DEAD (dead letters) or OUTCOME_UNKNOWN commands with their run, oldest first."""
    if status not in ("DEAD", "OUTCOME_UNKNOWN"):
        raise ValueError("status must be DEAD or OUTCOME_UNKNOWN")
    return _ops_dicts(
        "SELECT c.id AS command_id, c.kind, c.seq, c.status, c.attempts, c.last_error, c.recorded_at, "
        f"{_RUN_COLUMNS} FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
        "WHERE c.status = %s ORDER BY c.recorded_at, c.id LIMIT %s",
        [status, int(limit)],
    )


def overdue_tasks(*, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """OPEN tasks past their due date, most overdue first."""
    return _ops_dicts(
        "SELECT t.id AS task_id, t.title, t.step, t.assignment_mode, t.assignment_value, t.due_at, "
        f"EXTRACT(EPOCH FROM now() - t.due_at)::float AS overdue_seconds, {_RUN_COLUMNS} "
        "FROM workflow_tasks t JOIN workflow_runs r ON r.id = t.run_id "
        "WHERE t.status = 'OPEN' AND t.due_at < now() ORDER BY t.due_at, t.id LIMIT %s",
        [int(limit)],
    )


def runs_for_action(*, run_ids: Any) -> list[Run]:
    """The runs a bulk action would touch (unknown or malformed ids left out), oldest first."""
    import uuid

    ids = []
    for value in run_ids:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    return list(Run.objects.filter(pk__in=ids).order_by("created_at", "id"))


def task_counts() -> dict[str, int]:
    """Open tasks (OPEN or COMPLETING) and, of them, the OPEN ones past their due date."""
    return _ops_dicts(
        "SELECT count(*) AS open, count(*) FILTER (WHERE status = 'OPEN' AND due_at < now()) AS overdue "
        "FROM workflow_tasks WHERE status IN ('OPEN','COMPLETING')"
    )[0]


def live_run_counts() -> dict[str, int]:
    """Runs that are not ended, by status (FAILED included: it waits for a retry)."""
    rows = _ops_dicts(
        "SELECT status, count(*) AS runs FROM workflow_runs "
        "WHERE status IN ('PENDING','RUNNING','WAITING','COMPENSATING','FAILED') GROUP BY status"
    )
    return {r["status"]: int(r["runs"]) for r in rows}


def reconcile_candidate(*, command_id: Any) -> dict[str, Any] | None:
    """A command with its run and the step of its latest effect marker, for the reconcile page
    (None when there is no such command)."""
    try:
        command_id = int(command_id)
    except (TypeError, ValueError):
        return None
    rows = _ops_dicts(
        "SELECT c.id AS command_id, c.kind, c.seq, c.status, c.attempts, c.last_error, c.recorded_at, "
        "(SELECT m.step FROM workflow_effect_markers m WHERE m.command_id = c.id ORDER BY m.started_at DESC "
        f"LIMIT 1) AS effect_step, {_RUN_COLUMNS} FROM workflow_commands c JOIN workflow_runs r ON r.id = c.run_id "
        "WHERE c.id = %s",
        [command_id],
    )
    return rows[0] if rows else None


def _capture_model() -> Any:
    """The capture app's model, looked up by name (workflows never imports capture)."""
    from django.apps import apps

    try:
        return apps.get_model("capture", "Capture")
    except LookupError:
        return None


def capture_counts() -> dict[str, int]:
    """Record captures by status ({} without the capture app)."""
    from django.db.models import Count

    model = _capture_model()
    if model is None:
        return {}
    rows = model.objects.order_by().values("status").annotate(n=Count("id"))
    return {str(r["status"]): int(r["n"]) for r in rows}


def outcome_unknown_captures(*, limit: int = RADAR_LIMIT) -> list[dict[str, Any]]:
    """OUTCOME_UNKNOWN record captures, oldest first ([] without the capture app)."""
    model = _capture_model()
    if model is None:
        return []
    rows = (
        model.objects.filter(status="OUTCOME_UNKNOWN")
        .order_by("created_at", "id")
        .values("id", "model", "object_pk", "event", "attempts", "created_at", "effect_started_at")[:limit]
    )
    return [{"capture_id": r.pop("id"), **r} for r in rows]


# --- the designer ------------------------------------------------------------------------------


def definition_text(*, scope: str, definition_id: str, version: int) -> tuple[str, str]:
    """The stored source of one revision as ``(text, format)``, exactly as it was loaded
    (comments included), for the designer's editor and its diffs. Refuses DEFINITION_MISSING."""
    from workflows.exceptions import DefinitionMissing
    from workflows.models import DefinitionVersion

    row = (
        DefinitionVersion.objects.filter(scope=scope, definition_id=definition_id, version=int(version))
        .only("text", "format", "kind")
        .first()
    )
    if row is None or row.kind != "DOCUMENT":
        raise DefinitionMissing("no stored document for this revision")
    return row.text, row.format
