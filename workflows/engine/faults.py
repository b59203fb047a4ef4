"""Named fault points and the segment log: reliability instrumentation, off unless enabled.

Fault points are one-line calls (``faults.point("after_claim")``) at the places where a
crash or a database failure is most telling. They do nothing unless the environment names
them (read once, at import)::

    SWITCHYARD_FAULTS="after_claim:exit:0.05,before_publish:dberror:0.02,before_settle:stop:#3"

Each rule is ``point:action:trigger``:

- actions: ``exit`` (``os._exit(137)``, as a SIGKILL would leave it: no cleanup, no
  rollback message, no ack), ``dberror`` (alias ``raise``: raise ``OperationalError``, the
  error a lost connection gives), ``stop`` (SIGSTOP this process: frozen, holding whatever
  it holds, until someone sends SIGCONT);
- triggers: a probability per hit (``0.05``), or ``#N`` (the Nth hit of this process only).

``SWITCHYARD_FAULTS_SEED`` makes the probabilities repeatable (mixed with the pid, so two
workers do not fire in lockstep); ``SWITCHYARD_FAULTS_LOG`` names a file that gets one line
per fired fault (``<pid> <point> <action>``) so a harness can count them.

The points (see docs/reliability.md): ``after_claim`` (claimed, no segment yet),
``before_settle`` (inside the segment, before its fenced settlement), ``after_segment_commit``
(committed, not yet reported), ``before_publish`` (committed, the after-commit wake-ups not yet
sent), ``outbox_delivery`` (the receiver has the effect, the intent is not yet DELIVERED),
``bulk_before_settle`` (a bulk operation's batch applied its runs, its items not yet written).
The executor renews no lease (a segment's statements are bounded by the lease instead), so
there is no renewal point here.

The segment log (``SWITCHYARD_SEGMENT_LOG=1``) writes one ``workflow_segment_log`` row inside
every segment's transaction: the interval it held the run's execution lock and whether its
claim still stood when it wrote. A rolled-back segment leaves no row. When unset, both
features cost one truthiness test per call.
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass, field
from typing import Any

from workflows.engine import sql

POINTS = (
    "after_claim",
    "before_settle",
    "after_segment_commit",
    "before_publish",
    "outbox_delivery",
    "bulk_before_settle",
)
ACTIONS = ("exit", "dberror", "raise", "stop")


@dataclass
class Rule:
    point: str
    action: str
    probability: float | None = None
    nth: int | None = None
    hits: int = field(default=0)


_rules: dict[str, Rule] = {}
_random = random.Random()  # noqa: S311  (fault timing, not secrets)
_log_path = ""
_segment_log = False


def parse(spec: str) -> dict[str, Rule]:
    """Rules from a ``SWITCHYARD_FAULTS`` value; a malformed rule raises ValueError naming it."""
    rules: dict[str, Rule] = {}
    for raw in filter(None, (part.strip() for part in (spec or "").split(","))):
        parts = raw.split(":")
        if len(parts) != 3 or parts[0] not in POINTS or parts[1] not in ACTIONS:
            raise ValueError(f"fault rule {raw!r}: expected point:action:trigger with point in {POINTS}")
        point, action, trigger = parts
        if trigger.startswith("#"):
            rule = Rule(point, action, nth=int(trigger[1:]))
        else:
            probability = float(trigger)
            if not 0.0 <= probability <= 1.0:
                raise ValueError(f"fault rule {raw!r}: a probability is between 0 and 1")
            rule = Rule(point, action, probability=probability)
        rules[point] = rule
    return rules


def configure(spec: str = "", *, seed: str | None = None, log_path: str = "", segment_log: bool | None = None) -> None:
    """(Re)arm the fault points of this process (tests; the environment does it at import)."""
    global _rules, _log_path, _segment_log
    _rules = parse(spec)
    _log_path = log_path
    _random.seed(f"{seed}-{os.getpid()}" if seed is not None else None)
    if segment_log is not None:
        _segment_log = segment_log


def point(name: str) -> None:
    """A named fault point: nothing happens unless a rule arms it."""
    if _rules:
        rule = _rules.get(name)
        if rule is not None:
            _hit(rule)


def _hit(rule: Rule) -> None:
    rule.hits += 1
    fire = rule.hits == rule.nth if rule.nth is not None else _random.random() < (rule.probability or 0.0)
    if not fire:
        return
    if _log_path:
        # O_APPEND: one short write per line, so lines from several processes never interleave
        fd = os.open(_log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {rule.point} {rule.action}\n".encode())
        finally:
            os.close(fd)
    if rule.action == "exit":
        os._exit(137)
    if rule.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    from django.db import OperationalError

    raise OperationalError(f"fault injected at {rule.point}")


# --- the segment log ------------------------------------------------------------------------


def segment_started(run_id: Any, command_id: int, token: Any, executor_id: str) -> int | None:
    """Inside the segment, after its lock and fence: open the segment's log row."""
    if not _segment_log:
        return None
    from workflows.engine import db

    row = db.fetchone(
        sql.load("faults").segment_started,
        [run_id, command_id, token, executor_id[:255]],
    )
    return int(row[0]) if row else None


def segment_settling(log_id: int | None, command_id: int, token: Any, outcome: str) -> None:
    """Just before the fenced settlement: close the interval and note whether the claim still
    stood as far as committed data shows (independent of the settlement's own fence)."""
    if log_id is None:
        return
    from workflows.engine import db

    db.execute(
        sql.load("faults").segment_settling,
        [outcome[:16], command_id, token, log_id],
    )


def _from_environment() -> None:
    global _segment_log
    spec = os.environ.get("SWITCHYARD_FAULTS", "")
    if spec:
        configure(
            spec, seed=os.environ.get("SWITCHYARD_FAULTS_SEED"), log_path=os.environ.get("SWITCHYARD_FAULTS_LOG", "")
        )
    _segment_log = os.environ.get("SWITCHYARD_SEGMENT_LOG", "").strip().lower() in {"1", "true", "yes", "on"}


_from_environment()
