"""Celery's INFO lines about routine tasks (the sweeps every two seconds) stay out of the log;
everything else Celery logs, and any failure, stays in (docs/operations.md, "Logs")."""

from __future__ import annotations

import logging

import pytest

from workflows.tasks import ROUTINE_LOGGERS, QuietRoutine


def record(logger: str, level: int, msg: str, args: object) -> logging.LogRecord:
    return logging.LogRecord(logger, level, __file__, 1, msg, args, None)  # type: ignore[arg-type]


RECEIVED = "Task %(name)s[%(id)s] received"
SUCCEEDED = "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s"
SENDING = "Scheduler: Sending due task %s (%s)"


@pytest.mark.parametrize("task", ["workflows.sweep", "capture.sweep", "workflows.run_totals"])
def test_the_routine_tasks_lines_are_dropped(task: str) -> None:
    quiet = QuietRoutine()
    assert not quiet.filter(record("celery.worker.strategy", logging.INFO, RECEIVED, {"name": task, "id": "1"}))
    assert not quiet.filter(
        record(
            "celery.app.trace", logging.INFO, SUCCEEDED, {"name": task, "id": "1", "runtime": 0.01, "return_value": 0}
        )
    )
    assert not quiet.filter(record("celery.beat", logging.INFO, SENDING, ("workflows-sweep", task)))


def test_other_tasks_and_every_failure_are_kept() -> None:
    quiet = QuietRoutine()
    assert quiet.filter(record("celery.worker.strategy", logging.INFO, RECEIVED, {"name": "workflows.run", "id": "1"}))
    assert quiet.filter(record("celery.beat", logging.INFO, SENDING, ("workflows-retention", "workflows.retention")))
    failed = "Task %(name)s[%(id)s] raised unexpected: %(exc)s"
    assert quiet.filter(
        record("celery.app.trace", logging.ERROR, failed, {"name": "workflows.sweep", "id": "1", "exc": "x"})
    )
    assert quiet.filter(record("celery.beat", logging.INFO, "beat: Starting...", ()))


def test_the_filter_is_installed_once_on_celerys_loggers() -> None:
    from workflows import tasks

    tasks.install()  # AppConfig.ready ran it already: a second call adds nothing
    for name in ROUTINE_LOGGERS:
        assert sum(isinstance(f, QuietRoutine) for f in logging.getLogger(name).filters) == 1
