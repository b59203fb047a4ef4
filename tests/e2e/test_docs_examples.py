"""Every workflow document of README.md and docs/*.md runs to its end through a real worker.

The documents are found by scanning the Markdown (``tests.support.doc_examples``; how a block
is marked as a fragment, or given a start payload and answers: docs/development.md,
"Documented examples"), so a new example is covered by adding it. Each is loaded, published
and activated in a scope of its own, started, and then driven by a generic driver that answers
whatever the run (and the runs it called) waits for: a signal it waits for is sent (with the
example's payload for that name), an open task gets the example's decision for its step (else
its first decision), and a timer is made due (only when nothing else is waited for, so a
timeout or a due date never wins over an answer). The run must end in the example's status
(``COMPLETED`` unless it says otherwise), with no failure.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import doc_examples
from tests.support.ops import make_due
from tests.support.waiting import eventually
from workflows import definitions, operations
from workflows.exceptions import WorkflowError
from workflows.models import ENDED_STATUSES, Command, Park, ParkKind, Run, Task, TaskStatus
from workflows.queries import called_runs, plan_of

EXAMPLES = doc_examples.examples()


def test_the_scan_finds_the_documented_examples() -> None:
    by_file = {e.path for e in EXAMPLES}
    assert "docs/authoring.md" in by_file and "docs/api.md" in by_file
    assert len([e for e in EXAMPLES if e.path == "docs/authoring.md"]) >= 9


def test_every_yaml_block_is_a_whole_document_or_marked() -> None:
    """A block that is not a whole document must say so; a marked one must not be one (a
    marker cannot hide a document from the driver), and every example names its id."""
    for block in doc_examples.blocks():
        where = f"{block.path}:{block.line}"
        if block.marker in (doc_examples.FRAGMENT, doc_examples.OTHER):
            assert block.document is None, f"{where} is a whole document but marked {block.marker!r}"
        else:
            assert block.document is not None, (
                f"{where} is not a whole workflow document: mark it <!-- docs-example: fragment --> "
                "(or not-a-workflow), or complete it"
            )
    assert len({e.name for e in EXAMPLES}) == len(EXAMPLES)


def _deploy(text: str, scope: str) -> Any:
    ref = definitions.load(scope=scope, text=text, format="yaml")
    definitions.publish(scope=scope, definition_id=ref.definition_id, version=ref.version)
    definitions.activate(scope=scope, definition_id=ref.definition_id, version=ref.version, target_scope=scope)
    return ref


def _runs(root_id: Any) -> list[Run]:
    return [Run.objects.get(pk=root_id), *called_runs(run_id=root_id)]


def _answer(example: doc_examples.Example, run: Run, park: Park) -> bool:
    """Answer one wait; False when it is not one the driver answers now (a join, a call, a
    branch: their own waits are answered)."""
    if park.kind == ParkKind.SIGNAL:
        plan = plan_of(run)
        name = getattr(plan.steps.get(park.node), "signal", "") if plan is not None else ""
        operations.signal(
            run_id=run.id, name=name, payload=example.signals.get(name, {}), branch=park.branch_id or None
        )
        return True
    if park.kind == ParkKind.TASK:
        task = Task.objects.filter(
            run_id=run.id, step=park.node, branch_id=park.branch_id or "", status=TaskStatus.OPEN
        ).first()
        if task is None:
            return False
        given = example.decisions.get(park.node) or {"decision": task.decisions[0]["name"]}
        operations.complete_task(task_id=task.pk, decision=given["decision"], payload=given.get("payload"))
        return True
    return False


def _situation(root_id: Any) -> str:
    """What the runs are doing, for a driver that timed out."""
    lines = []
    for run in _runs(root_id):
        parks = list(Park.objects.filter(run_id=run.id, left_at__isnull=True).values_list("kind", "node", "branch_id"))
        lines.append(f"{run.definition_id} {run.status} at {run.current_step} {run.failure_message} waits: {parks}")
        refused = Command.objects.filter(run_id=run.id, status__in=["REJECTED", "FAILED", "STALE"])
        lines += [f"  {c.kind} #{c.seq} {c.status}: {c.last_error}" for c in refused]
    return "\n".join(lines)


def _drive(example: doc_examples.Example, root_id: Any, worker: Any) -> None:
    answered: set[int] = set()

    def waiting() -> list[tuple[Run, Park]]:
        found = []
        for run in _runs(root_id):
            if run.status in ENDED_STATUSES or run.status == "FAILED":
                continue
            parks = Park.objects.filter(run_id=run.id, left_at__isnull=True).exclude(pk__in=answered)
            found += [(run, park) for park in parks.order_by("since", "pk")]
        return found

    def ended_or_waiting() -> bool:
        if Run.objects.get(pk=root_id).status in (*ENDED_STATUSES, "FAILED"):
            return True
        runs = [run.id for run in _runs(root_id)]
        if Command.objects.filter(run_id__in=runs, status__in=["REJECTED", "FAILED"]).exists():
            # an answer the run refused (a payload its schema does not take): say so at once
            raise AssertionError(f"{example.name}: a command was refused\n{_situation(root_id)}")
        if any(not operations.await_idle(0, run_id=run.id).idle for run in _runs(root_id)):
            return False
        return any(park.kind in (ParkKind.SIGNAL, ParkKind.TASK, ParkKind.TIMER) for _, park in waiting())

    for _ in range(50):  # an example waits a handful of times
        eventually(
            ended_or_waiting,
            timeout=90,
            what=f"{example.name}: the run to end or to wait for something the driver answers",
            details=lambda: f"{_situation(root_id)}\n{worker.logs()}",
        )
        if Run.objects.get(pk=root_id).status in (*ENDED_STATUSES, "FAILED"):
            return
        open_waits = waiting()
        # answers before time: a timer is made due only when nothing else is waited for
        answers = [(r, p) for r, p in open_waits if p.kind != ParkKind.TIMER] or open_waits
        for run, park in answers:
            if park.kind == ParkKind.TIMER:
                make_due(run.id, "FIRE")
                answered.add(park.pk)
                break
            if _answer(example, run, park):
                answered.add(park.pk)
                break
    raise AssertionError(f"{example.name}: did not end after 50 answers")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_the_documented_example_runs_to_its_end(example: doc_examples.Example, celery_worker_process: Any) -> None:
    for required in example.requires:
        try:
            _deploy((doc_examples.REPO / required).read_text(), "default")
        except WorkflowError:
            pass  # already there (a packaged document the suite loaded)
    scope = f"docs-{example.line}-{example.definition_id}"[:60]
    ref = _deploy(example.text, scope)
    assert ref.definition_id == example.definition_id

    run_id = operations.start(definition_id=example.definition_id, scope=scope, payload=example.start).run_id
    _drive(example, run_id, celery_worker_process)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.failure_code, run.failure_message) == (example.end, "", ""), example.name
