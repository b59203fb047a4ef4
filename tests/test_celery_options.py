"""Switchyard's Celery tasks carry their own options (issue #39): install.md once asked for a
global ``CELERY_TASK_IGNORE_RESULT = True``, and a host's own task's ``.get()`` then answered
None. Now a host's Celery app with none of those settings runs Switchyard's tasks with results
ignored, late acknowledgement and re-queueing on a lost worker, and its own tasks keep the
host's defaults."""

from __future__ import annotations

from celery import Celery

import capture.tasks
import workflows.tasks


def test_switchyards_tasks_keep_their_options_and_the_hosts_tasks_keep_the_hosts() -> None:
    host = Celery("host", set_as_current=False)
    host.conf.update(task_ignore_result=False, task_acks_late=False, task_reject_on_worker_lost=False)

    @host.task(name="host.add")
    def add(a: int, b: int) -> int:
        return a + b

    host.finalize()
    ours = [name for name in host.tasks if name.startswith(("workflows.", "capture."))]
    assert {"workflows.run", "workflows.sweep", "capture.dispatch", "capture.sweep"} <= set(ours), ours
    for name in ours:
        task = host.tasks[name]
        assert (task.ignore_result, task.acks_late, task.reject_on_worker_lost) == (True, True, True), name
    own = host.tasks["host.add"]
    assert (own.ignore_result, own.acks_late, own.reject_on_worker_lost) == (False, False, False)
    assert capture.tasks.OWN_OPTIONS == workflows.tasks.OWN_OPTIONS
