"""The engine is wired by its imports alone: no hook globals filled at start-up (issue #27).

A segment routes a branch-addressed signal, a RESUME and a MIGRATION to the modules that
handle them whether or not ``WorkflowsConfig.ready`` ran, and the driver finds every step
type of a plan in one static registry.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from workflows.definitions.steps import REGISTRY
from workflows.engine import driver, segment
from workflows.engine.nodes import EXECUTORS

HOOKS = (
    "branch_handler",
    "instance_signal_router",
    "completion_branch_handler",
    "join_drainer",
    "timer_branch_handler",
    "resume_handler",
    "migration_handler",
)


def test_no_setup_module_and_no_hook_globals():
    assert importlib.util.find_spec("workflows.engine.setup") is None
    for name in HOOKS:
        assert not hasattr(segment, name), name
    assert not hasattr(driver, "register_node")
    assert not hasattr(driver, "NODES")


def test_the_registry_covers_every_step_class_of_a_plan():
    # every type of the definitions' registry, with nothing else (a new type is registered in
    # workflows.definitions.steps, not re-exported by the plan module: docs/development.md)
    assert set(EXECUTORS) == {kind.step_class for kind in REGISTRY.values()}
    assert all(callable(execute) for execute in EXECUTORS.values())


ROUTING = textwrap.dedent(
    """
    from unittest import mock

    import django

    # the application's ready() does not run: nothing can have been installed
    with mock.patch("workflows.apps.WorkflowsConfig.ready"):
        django.setup()

    from workflows.engine import calls, forks, migration, segment

    assert segment.APPLY["RESUME"] is calls.apply_resume
    assert segment.APPLY["MIGRATION"] is migration.apply_migration

    drive = mock.MagicMock()
    drive.plan.waits_for.return_value = True
    cmd = {"id": 7, "seq": 3, "kind": "SIGNAL", "payload": None, "target": {"name": "go", "branch": "b1"}}
    routed = object()
    with mock.patch.object(forks, "apply_branch_signal", return_value=routed) as branch_signal:
        assert segment.APPLY["SIGNAL"](drive, cmd) is routed
    branch_signal.assert_called_once_with(drive, cmd)
    print("routed")
    """
)


def test_a_fresh_interpreter_routes_a_branch_signal_without_the_apps_ready():
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONPATH": str(root)}
    env.setdefault("SECRET_KEY", "wiring-test-only")
    done = subprocess.run(
        [sys.executable, "-c", ROUTING], cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "routed"
