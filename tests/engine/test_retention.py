"""The data lifecycle: ended runs purged (and archived) with every row that references them,
open runs untouched, the per-version override, dry runs, restores, repeats and calls."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection
from django.test import override_settings
from django.utils import timezone

from tests.engine.documents import APPROVAL, ORDER_SIGNAL
from tests.engine.test_forks_and_calls import CHILD, MIDDLE, fork_doc
from workflows import conf, operations, tasks
from workflows.engine import outbox, retention
from workflows.models import (
    BulkOperation,
    BulkOperationItem,
    Command,
    Dedup,
    DefinitionVersion,
    EffectMarker,
    MigrationItem,
    MigrationRecord,
    Run,
    SegmentLog,
    Task,
    WebhookAttempt,
)

pytestmark = pytest.mark.django_db(transaction=True)

OLD = timedelta(days=40)


@pytest.fixture(autouse=True)
def _services() -> Any:
    from workflows.definitions import catalogs

    catalogs.callbacks.register("test.reserve", category="service")(lambda payload, headers: None)
    yield
    catalogs.callbacks.unregister("test.reserve", "service")


@pytest.fixture
def retention_settings() -> Any:
    """Apply WORKFLOWS["RETENTION"] overrides for the test (and drop them after)."""
    stack: list[Any] = []

    def _apply(**values: Any) -> None:
        ctx = override_settings(WORKFLOWS={"RETENTION": values})
        ctx.enable()
        stack.append(ctx)
        conf.reload()

    yield _apply
    for ctx in reversed(stack):
        ctx.disable()
    conf.reload()


def referencing_columns() -> list[tuple[str, str]]:
    """Every (table, column) of the schema that holds a run id: a foreign key to the runs
    table or a column named run_id, so a table added later is checked too."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT c.table_name, c.column_name FROM information_schema.columns c
            JOIN information_schema.tables t ON t.table_name = c.table_name AND t.table_schema = c.table_schema
            WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
              AND (c.column_name IN ('run_id', 'parent_run_id'))
            UNION
            SELECT kcu.table_name, kcu.column_name FROM information_schema.referential_constraints rc
            JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = rc.constraint_name
            JOIN information_schema.constraint_column_usage ccu ON ccu.constraint_name = rc.unique_constraint_name
            WHERE ccu.table_name = 'workflow_runs' AND kcu.table_schema = current_schema()
            ORDER BY 1, 2
            """
        )
        return [(str(t), str(c)) for t, c in cur.fetchall()]


def orphans() -> dict[str, int]:
    found = {}
    with connection.cursor() as cur:
        for table, column in referencing_columns():
            cur.execute(
                f"SELECT count(*) FROM {table} x WHERE x.{column} IS NOT NULL "  # names from the catalog
                f"AND NOT EXISTS (SELECT 1 FROM workflow_runs r WHERE r.id = x.{column})"
            )
            count = int(cur.fetchone()[0])
            if count:
                found[f"{table}.{column}"] = count
        cur.execute(
            "SELECT count(*) FROM workflow_effect_markers m "
            "WHERE NOT EXISTS (SELECT 1 FROM workflow_commands c WHERE c.id = m.command_id)"
        )
        if int(cur.fetchone()[0]):
            found["workflow_effect_markers.command_id"] = 1
    return found


def rows_of(run_ids: list[Any]) -> dict[str, str]:
    """Every stored row of these runs, as the archive writes them (run id -> JSON text)."""
    with connection.cursor() as cur:
        cur.execute(retention.SQL.archive_lines, [[uuid.UUID(str(r)) for r in run_ids]])
        return {json.loads(text)["run"]["id"]: text for (text,) in cur.fetchall()}


def table_counts() -> dict[str, int]:
    with connection.cursor() as cur:
        counts = {}
        for _name, table in retention.TABLES:
            cur.execute(f"SELECT count(*) FROM {table}")  # fixed names
            counts[table] = int(cur.fetchone()[0])
        return counts


def age(run_id: Any, by: timedelta = OLD) -> None:
    Run.objects.filter(pk=run_id).update(ended_at=timezone.now() - by)


def deliver_due() -> None:
    for intent_id in outbox.due_intents():
        outbox.deliver(intent_id)


def extras(run_id: Any) -> None:
    """The rows only some runs have: a segment log entry, an effect marker and a migration
    item, so the purge is shown to reach those tables too."""
    command = Command.objects.filter(run_id=run_id).order_by("seq").first()
    assert command is not None
    now = timezone.now()
    SegmentLog.objects.create(run_id=run_id, command_id=command.id, token=uuid.uuid4(), started_at=now)
    EffectMarker.objects.create(command=command, run_id=run_id, token=uuid.uuid4(), step="x", started_at=now)
    run = Run.objects.get(pk=run_id)
    record = MigrationRecord.objects.create(
        scope=run.scope, definition_id=run.definition_id, source_version=1, target_version=1, target_scope=run.scope
    )
    MigrationItem.objects.create(record=record, run=run, row=0, source_node="x", kind="TASK", action="move")


@pytest.fixture
def world(deploy: Any, drain: Any) -> dict[str, Any]:
    """Open and ended runs of several shapes; the ended ones 40 days old."""
    deploy(APPROVAL)
    deploy(ORDER_SIGNAL)
    deploy(fork_doc("all"))
    open_task = operations.start(definition_id="approval", payload={"number": "A-1", "total": 5000}).run_id
    open_order = operations.start(
        definition_id="order-signal", payload={"order": "o-open"}, idempotency_key="k-open"
    ).run_id
    open_fork = operations.start(definition_id="reviews", payload={}).run_id
    completed = operations.start(
        definition_id="approval", payload={"number": "A-2", "total": 10}, idempotency_key="k-done"
    ).run_id
    approved = operations.start(definition_id="approval", payload={"number": "A-3", "total": 2000}).run_id
    cancelled_order = operations.start(definition_id="order-signal", payload={"order": "o-gone"}).run_id
    cancelled_fork = operations.start(definition_id="reviews", payload={}).run_id
    drain()
    deliver_due()
    drain()
    task = Task.objects.get(run_id=approved, status="OPEN")
    operations.complete_task(task_id=task.id, decision="approve", payload={"comment": "ok"})
    operations.cancel(run_id=cancelled_order, reason="customer left")
    operations.cancel(run_id=cancelled_fork, reason="not needed")
    drain()
    deliver_due()
    drain()
    ended = [completed, approved, cancelled_order, cancelled_fork]
    live = [open_task, open_order, open_fork]
    assert {Run.objects.get(pk=r).status for r in ended} == {"COMPLETED", "CANCELLED"}
    assert {Run.objects.get(pk=r).status for r in live} <= {"WAITING", "RUNNING", "PENDING"}
    for run_id in ended:
        age(run_id)
    extras(cancelled_order)
    extras(open_order)
    return {"ended": [str(r) for r in ended], "live": [str(r) for r in live]}


def test_a_purge_removes_exactly_the_old_ended_runs_with_all_their_rows(world: dict[str, Any]) -> None:
    recent = world["ended"][0]
    age(recent, timedelta(days=2))
    live_before = rows_of(world["live"])
    assert len(live_before) == 3
    before = table_counts()

    report = operations.purge_runs(ended_before=timezone.now() - timedelta(days=30), batch_size=2)

    gone = world["ended"][1:]
    assert report.runs == 3 and report.batches >= 2  # batches of two
    assert not Run.objects.filter(pk__in=gone).exists()
    assert rows_of(gone) == {}
    assert rows_of(world["live"]) == live_before  # every row of the open runs, unchanged
    assert Run.objects.filter(pk=recent).exists()  # ended, but not before the cutoff
    assert orphans() == {}
    after = table_counts()
    assert {table: before[table] - after[table] for table in before} == {
        table: report.rows[name] for name, table in retention.TABLES
    }
    assert report.rows["history"] > 0 and report.rows["commands"] > 0 and report.rows["effect_markers"] == 1
    assert report.rows["segments"] == 1 and report.rows["migration_items"] == 1 and report.rows["branches"] > 0
    assert Dedup.objects.filter(key="k-open").exists()  # the open run's key stays


def test_the_policy_default_keeps_everything_and_the_override_wins(
    world: dict[str, Any], retention_settings: Any
) -> None:
    counts = table_counts()
    assert operations.apply_retention()["runs"] == 0  # no ENDED_RUNS_DAYS, no override: kept forever
    assert table_counts() == counts

    # the site keeps 30 days; the approval's version keeps 90, so its runs (40 days) stay
    retention_settings(ENDED_RUNS_DAYS=30)
    DefinitionVersion.objects.filter(definition_id="approval").update(retention_days=90)
    approvals = [r for r in world["ended"] if Run.objects.get(pk=r).definition_id == "approval"]
    report = operations.purge_runs()
    others = [r for r in world["ended"] if r not in approvals]
    assert report.runs == len(others) == 2
    assert set(map(str, Run.objects.filter(pk__in=world["ended"]).values_list("id", flat=True))) == set(approvals)

    # a shorter override purges under a site that keeps forever
    retention_settings(ENDED_RUNS_DAYS=None)
    DefinitionVersion.objects.filter(definition_id="approval").update(retention_days=10)
    assert operations.apply_retention()["runs"] == 2
    assert not Run.objects.filter(pk__in=world["ended"]).exists()
    assert Run.objects.filter(pk__in=world["live"]).count() == 3
    assert orphans() == {}


def test_a_dry_run_counts_and_changes_nothing(world: dict[str, Any], tmp_path: Path) -> None:
    counts = table_counts()
    live = rows_of(world["live"])
    out = _call("purge_runs", "--ended-before", "2999-01-01", "--dry-run", "--archive-dir", str(tmp_path))
    assert "would purge 4 run(s)" in out
    assert table_counts() == counts
    assert rows_of(world["live"]) == live
    assert list(tmp_path.iterdir()) == []  # no archive either
    dry = operations.purge_runs(ended_before=timezone.now(), dry_run=True)
    real = operations.purge_runs(ended_before=timezone.now())
    assert dry.rows == real.rows and real.runs == 4


def test_the_archive_replays_to_the_stored_state(world: dict[str, Any], tmp_path: Path) -> None:
    stored = rows_of(world["ended"])
    report = operations.purge_runs(ended_before=timezone.now(), archive_dir=str(tmp_path), batch_size=3)
    assert report.runs == 4 and len(report.archives) == 2
    assert not Run.objects.filter(pk__in=world["ended"]).exists()
    lines = [
        json.loads(line) for path in sorted(tmp_path.glob("runs-*.jsonl")) for line in path.read_text().splitlines()
    ]
    assert sorted(item["run"]["id"] for item in lines) == sorted(world["ended"])
    assert not list(tmp_path.glob("*.partial"))

    out = _call("restore_runs", *map(str, sorted(tmp_path.glob("runs-*.jsonl"))))
    assert "restored 4 run(s)" in out
    assert rows_of(world["ended"]) == stored  # every row of every table, as it was
    again = _call("restore_runs", *map(str, sorted(tmp_path.glob("runs-*.jsonl"))))
    assert "restored 0 run(s), skipped 4" in again
    assert rows_of(world["ended"]) == stored
    assert orphans() == {}


def test_an_archive_line_holding_another_run_s_rows_is_refused_and_no_live_run_is_touched(
    world: dict[str, Any], tmp_path: Path
) -> None:
    """Issue #40: a tampered archive line carried a SIGNAL command naming another, live run;
    restore_runs inserted it, and the live run received an injected signal."""
    operations.purge_runs(ended_before=timezone.now(), archive_dir=str(tmp_path))
    files = sorted(tmp_path.glob("runs-*.jsonl"))
    lines = [json.loads(line) for path in files for line in path.read_text().splitlines()]
    live_run = world["live"][0]
    live = rows_of(world["live"])
    counts = table_counts()
    forged = lines[0]
    command = dict(forged["commands"][0])
    command.update(id=10**12, run_id=live_run, kind="SIGNAL", status="PENDING", seq=10**6, dedup_key="forged")
    forged["commands"].append(command)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join(json.dumps(item) for item in lines) + "\n")

    with pytest.raises(CommandError, match="line 1 holds rows of another run than its own; nothing was restored"):
        _call("restore_runs", str(tampered))
    assert table_counts() == counts  # not even the lines before or after it
    assert rows_of(world["live"]) == live
    assert not Command.objects.filter(run_id=live_run, dedup_key="forged").exists()


def test_a_crash_after_the_archive_loses_no_run(world: dict[str, Any], tmp_path: Path, monkeypatch: Any) -> None:
    """Killed between the fsynced archive and the commit: the rows stay, and the next purge of
    the same runs replaces that file (named by its runs) rather than writing a second copy."""
    stored = rows_of(world["ended"])
    real_write = retention.write_archive

    def write_then_die(directory: Any, lines: list[str], **kwargs: Any) -> Path:
        real_write(directory, lines, **kwargs)
        raise SystemExit("worker killed")

    monkeypatch.setattr(retention, "write_archive", write_then_die)
    with pytest.raises(SystemExit):
        operations.purge_runs(ended_before=timezone.now(), archive_dir=str(tmp_path))
    assert rows_of(world["ended"]) == stored  # the batch rolled back
    (first,) = tmp_path.glob("runs-*.jsonl")
    monkeypatch.setattr(retention, "write_archive", real_write)
    report = operations.purge_runs(ended_before=timezone.now(), archive_dir=str(tmp_path))
    assert report.runs == 4 and report.archives == [str(first)]  # the same runs: the same file, replaced
    files = sorted(tmp_path.glob("runs-*"))
    assert files == [first] and len(first.read_text().splitlines()) == 4  # every run once
    restored = operations.restore_runs(paths=[str(p) for p in files])
    assert (restored.runs, restored.skipped) == (4, 0)
    assert rows_of(world["ended"]) == stored


def test_a_repeated_retention_task_is_harmless(world: dict[str, Any], retention_settings: Any, tmp_path: Path) -> None:
    retention_settings(ENDED_RUNS_DAYS=30, ARCHIVE_DIR=str(tmp_path / "archive"))
    live = rows_of(world["live"])
    first = tasks.retention.run()
    second = tasks.retention.run()
    assert first["runs"] == 4 and second["runs"] == 0
    assert rows_of(world["live"]) == live
    assert len(list((tmp_path / "archive").glob("runs-*.jsonl"))) == 1
    assert orphans() == {}


def test_a_called_child_stays_while_its_caller_is_open(deploy: Any, drain: Any) -> None:
    deploy(CHILD)
    deploy(MIDDLE)
    parent = operations.start(definition_id="middle", payload={"x": 1}).run_id
    drain()
    child = Run.objects.get(parent_run_id=parent)
    for task in Task.objects.filter(run_id=child.id, status="OPEN"):
        operations.complete_task(task_id=task.id, decision="approve")
    drain()
    assert Run.objects.get(pk=child.id).status == "COMPLETED"
    assert Run.objects.get(pk=parent).status == "WAITING"  # its resume not yet delivered
    age(child.id)
    assert operations.purge_runs(ended_before=timezone.now()).runs == 0  # the caller still needs it

    deliver_due()
    drain()
    assert Run.objects.get(pk=parent).status == "COMPLETED"
    age(parent)
    # children go first and their caller in a later batch: both, in batches of one
    report = operations.purge_runs(ended_before=timezone.now(), batch_size=1)
    assert report.runs == 2 and report.batches == 2
    assert not Run.objects.filter(pk__in=[parent, child.id]).exists()
    assert orphans() == {}


def test_a_child_restored_without_its_caller_drops_the_link(deploy: Any, drain: Any, tmp_path: Path) -> None:
    deploy(CHILD)
    deploy(MIDDLE)
    parent = operations.start(definition_id="middle", payload={}).run_id
    drain()
    operations.cancel(run_id=parent, reason="stop")
    child = Run.objects.get(parent_run_id=parent)
    operations.purge_runs(ended_before=timezone.now(), archive_dir=str(tmp_path), batch_size=1)
    first = sorted(tmp_path.glob("runs-*.jsonl"))
    child_file = next(p for p in first if json.loads(p.read_text())["run"]["id"] == str(child.id))
    operations.restore_runs(paths=[str(child_file)])
    assert Run.objects.get(pk=child.id).parent_run_id is None


def test_failed_runs_stay_unless_asked_for(deploy: Any, drain: Any, retention_settings: Any) -> None:
    deploy(APPROVAL)
    run_id = operations.start(definition_id="approval", payload={"number": "A-9", "total": 2000}).run_id
    drain()
    operations.complete_task(task_id=Task.objects.get(run_id=run_id).id, decision="reject")
    drain()
    assert Run.objects.get(pk=run_id).status == "FAILED"
    age(run_id)
    assert operations.purge_runs(ended_before=timezone.now()).runs == 0  # a retry could still recover it
    retention_settings(ENDED_RUNS_DAYS=1)
    assert operations.apply_retention()["runs"] == 0
    retention_settings(FAILED_RUNS_DAYS=30)
    assert operations.apply_retention()["runs"] == 1
    assert orphans() == {}


def test_the_definition_filter(world: dict[str, Any]) -> None:
    report = operations.purge_runs(ended_before=timezone.now(), definition_id="reviews")
    assert report.runs == 1
    assert Run.objects.filter(pk__in=world["ended"]).count() == 3


def test_idempotency_keys_expire_on_their_schedule(world: dict[str, Any], retention_settings: Any) -> None:
    Dedup.objects.filter(key="k-open").update(created_at=timezone.now() - timedelta(days=8))
    assert operations.apply_retention()["keys"] == 1
    assert not Dedup.objects.filter(key="k-open").exists()
    assert Dedup.objects.filter(key="k-done").exists()
    retention_settings(IDEMPOTENCY_KEYS_DAYS=30)
    Dedup.objects.filter(key="k-done").update(created_at=timezone.now() - timedelta(days=8))
    assert operations.apply_retention()["keys"] == 0
    # a start repeated with the expired key is a new request
    again = operations.start(definition_id="order-signal", payload={"order": "o-open"}, idempotency_key="k-open")
    assert not again.replay and str(again.run_id) != world["live"][1]


def test_the_command_refuses_a_bad_date_and_changes_nothing(world: dict[str, Any]) -> None:
    counts = table_counts()
    with pytest.raises(CommandError, match="ISO date"):
        call_command("purge_runs", "--ended-before", "yesterday")
    with pytest.raises(CommandError, match="batch-size"):
        call_command("purge_runs", "--ended-before", "2999-01-01", "--batch-size", "0")
    assert table_counts() == counts


def test_the_command_refuses_an_archive_folder_that_is_a_file_and_changes_nothing(
    world: dict[str, Any], tmp_path: Path
) -> None:
    # issue #40: pointed at a file, purge_runs ended in a traceback
    a_file = tmp_path / "archive.jsonl"
    a_file.write_text("")
    counts = table_counts()
    with pytest.raises(CommandError, match=r"^--archive-dir names a file, not a folder$"):
        call_command("purge_runs", "--ended-before", "2999-01-01", "--archive-dir", str(a_file))
    with pytest.raises(CommandError, match=r"^--archive-dir cannot be made"):
        call_command("purge_runs", "--ended-before", "2999-01-01", "--archive-dir", str(a_file / "below"))
    assert table_counts() == counts
    assert a_file.read_text() == ""


def _call(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_the_retention_task_is_on_the_beat(settings: Any) -> None:
    entries = {entry["task"]: entry for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert entries["workflows.retention"]["schedule"] == 3600.0
    assert tasks.retention.name == "workflows.retention"


# --- every foreign key that reaches a run -------------------------------------------------


def foreign_keys_reaching_runs() -> set[tuple[str, str]]:
    """(table, column) of every foreign key, in the models of every installed app, that reaches
    the runs table: pointing at it, or at a model whose rows reach it (commands, outbox
    intents, ...), followed until nothing new is found."""
    from django.apps import apps

    models = [m for m in apps.get_models(include_auto_created=True) if not m._meta.proxy]
    reaching: set[Any] = {Run}
    found: set[tuple[str, str]] = set()
    grew = True
    while grew:
        grew = False
        for model in models:
            for f in model._meta.get_fields():
                if not (f.is_relation and f.concrete and (f.many_to_one or f.one_to_one)):
                    continue
                if f.related_model in reaching and (model._meta.db_table, f.column) not in found:
                    found.add((model._meta.db_table, f.column))
                    if model not in reaching:
                        reaching.add(model)
                    grew = True
    return found


def test_every_foreign_key_that_reaches_a_run_is_handled_by_the_purge() -> None:
    found = foreign_keys_reaching_runs()
    assert ("workflow_bulk_operation_items", "run_id") in found  # the enumeration reaches them
    assert ("workflow_webhook_attempts", "intent_id") in found  # through the outbox intent
    missing = found - set(retention.REFERENCES)
    assert not missing, f"foreign keys to runs the purge does not handle: {sorted(missing)}"
    tables = dict(retention.TABLES)
    delete = retention.SQL.delete_rows
    archive = retention.SQL.archive_lines
    for (table, _column), how in retention.REFERENCES.items():
        if how == "candidates":
            continue
        assert tables[how] == table
        assert f"DELETE FROM {table} " in delete, table
        assert f"'{how}'" in archive and f"FROM {table} " in archive, table


WEBHOOK_URL = "https://hooks.invalid/switchyard"  # never resolves: each delivery dies at its first attempt


@pytest.fixture
def used(deploy: Any, drain: Any) -> dict[str, Any]:
    """Ended runs that bulk operations and webhook deliveries touched, 40 days old."""
    deploy(APPROVAL)
    operations.webhook_create(url=WEBHOOK_URL, events=["run.started", "run.completed", "run.cancelled"])
    completed = [
        operations.start(definition_id="approval", payload={"number": f"C-{i}", "total": 10}).run_id for i in range(2)
    ]
    waiting = [
        operations.start(definition_id="approval", payload={"number": f"W-{i}", "total": 5000}).run_id for i in range(3)
    ]
    drain()
    operation = operations.bulk_operation_create(action="cancel", run_ids=waiting[:2], reason="bulk")
    while not operations.bulk_operation_apply_batch(operation_id=operation).done:
        pass
    drain()
    deliver_due()
    drain()
    deliver_due()
    ended = [*completed, *waiting[:2]]
    assert {Run.objects.get(pk=r).status for r in ended} == {"COMPLETED", "CANCELLED"}
    assert BulkOperationItem.objects.filter(run_id__in=waiting[:2]).count() == 2
    assert WebhookAttempt.objects.filter(intent__run_id__in=ended).count() >= 6
    for run_id in ended:
        age(run_id)
    return {"ended": [str(r) for r in ended], "live": str(waiting[2]), "operation": operation}


def test_purge_runs_after_bulk_operations_and_webhooks(used: dict[str, Any], tmp_path: Path) -> None:
    stored = rows_of(used["ended"])
    live = rows_of([used["live"]])
    out = _call("purge_runs", "--ended-before", "2999-01-01", "--archive-dir", str(tmp_path), "--batch-size", "3")
    assert "purged 4 run(s) in 2 batch(es)" in out
    assert "bulk_items: 2" in out and "webhook_attempts:" in out
    assert not Run.objects.filter(pk__in=used["ended"]).exists()
    assert not BulkOperationItem.objects.filter(run_id__in=used["ended"]).exists()
    assert not WebhookAttempt.objects.filter(intent__run_id__in=used["ended"]).exists()
    assert rows_of([used["live"]]) == live
    assert orphans() == {}
    assert BulkOperation.objects.filter(pk=used["operation"]).exists()  # the operator's record stays

    # the archive holds every row, bulk items and delivery attempts included, and restores them
    operations.restore_runs(paths=[str(p) for p in sorted(tmp_path.glob("runs-*.jsonl"))])
    assert rows_of(used["ended"]) == stored


def test_the_retention_task_after_bulk_operations_and_webhooks(
    used: dict[str, Any], retention_settings: Any, tmp_path: Path, caplog: Any
) -> None:
    retention_settings(ENDED_RUNS_DAYS=30, ARCHIVE_DIR=str(tmp_path))
    Dedup.objects.update(created_at=timezone.now() - timedelta(days=8))
    keys = Dedup.objects.count()
    caplog.set_level("INFO", logger="workflows.retention")
    first = tasks.retention.run()
    assert first == {"runs": 4, "keys": keys, "more": 0}
    assert tasks.retention.run() == {"runs": 0, "keys": 0, "more": 0}
    assert not Run.objects.filter(pk__in=used["ended"]).exists()
    assert Run.objects.filter(pk=used["live"]).exists()
    assert orphans() == {}
    assert len(list(tmp_path.glob("runs-*.jsonl"))) == 1
    assert [r.getMessage() for r in caplog.records if "purged" in r.getMessage()] == ["purged 4 run(s)"]


@pytest.fixture
def unhandled_reference() -> Any:
    """A table the purge does not know, whose deferred foreign key to the runs fails every
    batch at commit (what bulk-operation items and webhook attempts did before)."""
    with connection.cursor() as cur:
        cur.execute(
            "CREATE TABLE test_unhandled_run_ref (run_id uuid NOT NULL REFERENCES workflow_runs (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )

    def refer(run_ids: list[str]) -> None:
        with connection.cursor() as cur:
            cur.executemany("INSERT INTO test_unhandled_run_ref VALUES (%s)", [[r] for r in run_ids])

    yield refer
    with connection.cursor() as cur:
        cur.execute("DROP TABLE test_unhandled_run_ref")


def test_a_batch_that_fails_at_commit_leaves_no_archive_and_keys_still_expire(
    world: dict[str, Any], retention_settings: Any, tmp_path: Path, unhandled_reference: Any, caplog: Any
) -> None:
    retention_settings(ENDED_RUNS_DAYS=30, ARCHIVE_DIR=str(tmp_path))
    unhandled_reference(world["ended"])
    Dedup.objects.filter(key="k-open").update(created_at=timezone.now() - timedelta(days=8))
    stored = rows_of(world["ended"])
    caplog.set_level("INFO", logger="workflows.retention")
    for _round in range(2):
        with pytest.raises(IntegrityError):
            tasks.retention.run()
        assert list(tmp_path.iterdir()) == []  # the rolled-back batch's file is gone, no copy piles up
    assert rows_of(world["ended"]) == stored
    assert not Dedup.objects.filter(key="k-open").exists()  # expired although the purge failed
    assert not [r for r in caplog.records if "purged" in r.getMessage()]  # nothing claimed purged
    with pytest.raises(IntegrityError):
        _call("purge_runs", "--ended-before", "2999-01-01", "--archive-dir", str(tmp_path))
    assert list(tmp_path.iterdir()) == []
