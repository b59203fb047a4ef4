from pathlib import Path

from workflows.definitions import compile_text
from workflows.definitions.plan import HumanTaskStep, apply_update

DEMO = Path(__file__).resolve().parents[2] / "demo" / "workflows" / "purchase-approval.yaml"


def test_demo_document_compiles_to_a_plan():
    plan = compile_text(DEMO.read_text())
    assert plan.definition_id == "purchase-approval"
    assert plan.initial_step == "route"
    task = plan.step("approve")
    assert isinstance(task, HumanTaskStep)
    assert task.assignment.mode == "group"
    assert task.assignment.value == "approvers"
    assert task.due is not None and task.due.delay.seconds == 3 * 86400
    assert task.title_template.evaluate({"state": {"number": "PO-1"}}) == "Approve purchase PO-1"
    state = {"number": "PO-1", "total": 10}
    updated = apply_update(task.decisions[0].set, state, {"state": state, "payload": {}, "decision": "approve"})
    assert updated == {"number": "PO-1", "total": 10, "status": "approved", "comment": ""}
