"""The node executors: one per step type of a plan, in one static registry.

``EXECUTORS`` maps every ``Step`` class of ``workflows.definitions.plan`` to the function
that executes it on a drive; each answers ``Next(step)``, ``WAIT``, ``END`` or ``BRANCH_DONE``
(``nodes.base``). The driver looks a step up here and nowhere else: no node registers itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workflows.definitions import plan as p
from workflows.engine.context import Drive
from workflows.engine.nodes import (
    call,
    compensation,
    decision,
    effects,
    fork,
    human_task,
    join,
    service,
    terminal,
    timer,
    wait_signal,
)
from workflows.engine.nodes.base import Outcome

EXECUTORS: dict[type[p.Step], Callable[[Drive, Any], Outcome]] = {
    p.ServiceStep: service.execute,
    p.DecisionStep: decision.execute,
    p.WaitSignalStep: wait_signal.execute,
    p.TimerStep: timer.execute,
    p.HumanTaskStep: human_task.execute,
    p.ForkStep: fork.execute,
    p.JoinStep: join.execute,
    p.CompensationStep: compensation.execute,
    p.CallStep: call.execute,
    p.CompleteStep: terminal.complete,
    p.FailStep: terminal.fail,
    p.EndStep: terminal.end,
    p.EmailStep: effects.email,
    p.AgentStep: effects.agent,
    p.ScriptStep: effects.script,
}
