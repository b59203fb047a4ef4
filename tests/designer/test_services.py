"""The designer's document services without HTTP: minting, step write-back, checks, diffs."""

from __future__ import annotations

import pytest

from designer import services
from workflows.definitions.documents import parse

DOC = """\
# a comment at the top stays
definitionId: tiny
definitionVersion: 1   # minted by the designer
contract: {name: tiny.v1}
initialStep: wait
steps:
  # the first step
  - id: wait
    type: timer
    after: PT1H
    next: done

  # the end
  - id: done
    type: complete
"""


def test_minting_changes_only_the_version_line() -> None:
    minted = services.set_version(DOC, 12)
    assert minted == DOC.replace("definitionVersion: 1   #", "definitionVersion: 12   #")


def test_minting_a_json_document_keeps_it_json() -> None:
    text = '{"definitionId": "j", "definitionVersion": 3, "contract": {"name": "j.v1"}, "initialStep": "d",\n'
    text += ' "steps": [{"id": "d", "type": "complete"}]}'
    minted = services.set_version(text, 4)
    assert '"definitionVersion": 4' in minted
    assert parse(minted, "json").data["definitionVersion"] == 4


def test_minting_adds_a_missing_version_after_the_id() -> None:
    text = DOC.replace("definitionVersion: 1   # minted by the designer\n", "")
    minted = services.set_version(text, 2)
    assert "definitionId: tiny\ndefinitionVersion: 2\n" in minted
    assert services.check(minted).ok


def test_minting_keeps_windows_line_endings() -> None:
    minted = services.set_version(DOC.replace("\n", "\r\n"), 5)
    assert "definitionVersion: 5   # minted by the designer\r\n" in minted


def test_check_reports_every_problem_with_its_line() -> None:
    broken = DOC.replace("next: done", "next: nowhere").replace("type: complete", "type: complete\n    bogus: 1")
    result = services.check(broken)
    assert not result.ok
    lines = {p.pointer: p.line for p in result.problems}
    assert lines["/steps/0/next"] == 11
    assert lines["/steps/1/bogus"] == 16


def test_check_reports_a_syntax_error_at_its_line() -> None:
    result = services.check(DOC.replace("    after: PT1H", "    after: [PT1H"))
    assert not result.ok
    assert result.problems[0].type == "syntax"
    assert result.problems[0].line is not None


def test_check_reports_a_yaml_error_with_its_reason_line_and_column() -> None:
    result = services.check(DOC.replace("    after: PT1H", "    after: PT1H\n      bad: 1"))
    [problem] = result.problems
    assert (problem.type, problem.line, problem.column) == ("syntax", 11, 10)
    assert problem.message.startswith("not valid YAML: mapping values are not allowed")
    assert services.problems_for_lines(result.problems) == [{"line": 11, "column": 10, "message": problem.message}]


def test_check_reports_a_cel_problem_at_its_character_in_the_document() -> None:
    text = DOC.replace("    after: PT1H\n", '    after: PT1H\n    title: "{{ state.a + }}"\n').replace(
        "type: timer", "type: human-task\n    assignment: {mode: group, value: ops}"
    )
    problems = [p for p in services.check(text).problems if p.type == "expression"]
    assert problems, services.check(text).problems
    assert problems[0].line == 12 and problems[0].column is not None
    assert "column" in problems[0].message


def test_the_live_expression_check_names_the_column() -> None:
    assert services.check_expression("state.a +", variables="state") == (
        "expression does not parse as CEL: column 9: the expression ends too early"
    )


def test_a_step_is_appended_and_connected_leaving_comments_elsewhere() -> None:
    step = {
        "id": "look",
        "type": "human-task",
        "assignment": {"mode": "group", "value": "ops"},
        "decisions": [{"name": "ok", "next": "done"}],
    }
    text, rewritten = services.apply_step(DOC, step, connect_from="wait|next")
    assert not rewritten
    assert "# a comment at the top stays" in text and "# the first step" in text and "# the end" in text
    plan = services.check(text).plan
    assert plan is not None
    assert plan.steps["wait"].next == "look"
    assert plan.steps["look"].decisions[0].next == "done"


def test_a_step_is_replaced_in_place() -> None:
    text, _ = services.apply_step(DOC, {"id": "wait", "type": "timer", "after": "PT2H", "next": "done"}, replace="wait")
    assert "after: PT2H" in text and "PT1H" not in text
    assert text.index("# the end") > text.index("after: PT2H")
    assert services.check(text).ok


def test_renaming_a_step_to_an_existing_id_is_refused() -> None:
    with pytest.raises(services.EditRefused):
        services.apply_step(DOC, {"id": "done", "type": "complete"}, replace="wait")


def test_a_document_that_does_not_read_is_not_edited() -> None:
    with pytest.raises(services.EditRefused):
        services.apply_step("steps: [", {"id": "x", "type": "complete"})


def test_flow_style_steps_are_rewritten_whole() -> None:
    text = "definitionId: f\ndefinitionVersion: 1\ncontract: {name: f.v1}\ninitialStep: a\n"
    text += "steps: [{id: a, type: timer, after: PT1M, next: b}, {id: b, type: complete}]\n"
    step = {"id": "c", "type": "timer", "after": "PT1M", "next": "b"}
    new, rewritten = services.apply_step(text, step, connect_from="a|next")
    assert rewritten
    plan = services.check(new).plan
    assert plan is not None and plan.steps["a"].next == "c"


def test_strings_that_yaml_1_1_would_read_as_booleans_stay_text() -> None:
    step = {"id": "no", "type": "end", "reason": "on"}
    text, _ = services.apply_step(DOC, step, connect_from="wait|next")
    assert parse(text).data["steps"][-1] == step


def test_graph_diff_names_added_removed_and_changed_steps() -> None:
    left = services.check(DOC).plan
    changed = DOC.replace("after: PT1H", "after: PT2H").replace("  # the end\n  - id: done\n", "  - id: finished\n")
    changed = changed.replace("next: done", "next: finished")
    right = services.check(changed).plan
    assert left is not None and right is not None
    added, removed, modified = services.graph_diff(left, right)
    assert [s.id for s in added] == ["finished"]
    assert [s.id for s in removed] == ["done"]
    assert [(s.id, s.fields) for s in modified] == [("wait", ["delay", "next"])]


def test_text_diff_pairs_changed_lines_and_cuts_unchanged_stretches() -> None:
    left = "\n".join(f"line {i}" for i in range(30))
    right = left.replace("line 15", "line fifteen")
    rows = services.text_diff(left, right)
    changed = [r for r in rows if r.kind == "replace"]
    assert [(r.left_no, r.left, r.right_no, r.right) for r in changed] == [(16, "line 15", 16, "line fifteen")]
    assert rows[0].kind == "skip" and rows[-1].kind == "skip"
    assert len(rows) == 1 + 3 + 1 + 3 + 1


def test_marked_graph_steps_carry_their_mark() -> None:
    plan = services.check(DOC).plan
    assert plan is not None
    svg = services.graph_svg(plan, marks={"wait": "added"})
    assert 'class="wfg-node wfg-node-timer dsg-added" data-step="wait"' in svg


def test_cel_is_checked_with_the_fields_variables() -> None:
    assert services.check_expression("state.total > 10", variables="state") is None
    assert services.check_expression("payload.x", variables="state") is not None
    assert services.check_expression("payload.x == decision", variables="decision") is None
    assert services.check_expression("Hello {{ state.name }}", variables="state", template=True) is None
    assert services.check_expression("Hello {{ state. }}", variables="state", template=True) is not None


def test_a_route_when_may_read_named_conditions_as_loading_does() -> None:
    # the step form's route row checks with the compiler's variables for a decision's when
    assert services.check_expression("conditions['purchase.small'] && state.total > 1", variables="when") is None
    assert services.check_expression("conditions['purchase.small']", variables="state") is not None
    assert services.check_expression("payload.x", variables="when") is not None


COMMENTED = """\
# Purchase approval
definitionId: purchase-approval
definitionVersion: 3                 # the designer mints it
contract: {name: purchase.v1}
initialStep: route
steps:
  - {id: route, type: decision, routes: [{when: "state.total > 5000", to: done}], default: manager}
  # the manager decides
  - id: manager
    type: human-task
    title: 'Approve purchase {{ state.number }}'   # single quotes kept
    assignment: {mode: group, value: managers}
    # three days, then it is done
    due: {after: P3D, next: done}
    reminders:
      every: P1D
    decisions:
      - name: approve   # the usual answer
        next: done
      - {name: reject,  next: done}
  - id: done
    type: complete
"""


def _changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    import difflib

    old, new = before.splitlines(), after.splitlines()
    changes = []
    for tag, a1, a2, b1, b2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag != "equal":
            changes.append(("\n".join(old[a1:a2]), "\n".join(new[b1:b2])))
    return changes


def test_a_one_step_edit_changes_only_the_lines_of_the_values_it_changes() -> None:
    step = services.step_of(COMMENTED, "manager")
    assert step is not None
    step["due"]["after"] = "P5D"
    text, rewritten = services.apply_step(COMMENTED, step, replace="manager")
    assert not rewritten
    # comments, quoting, flow style and spacing inside the edited step stay as written
    assert _changed_lines(COMMENTED, text) == [
        ("    due: {after: P3D, next: done}", "    due: {after: P5D, next: done}")
    ]


def test_a_field_removed_by_the_form_takes_only_its_own_lines() -> None:
    step = services.step_of(COMMENTED, "manager")
    assert step is not None
    del step["reminders"]
    text, _ = services.apply_step(COMMENTED, step, replace="manager")
    assert _changed_lines(COMMENTED, text) == [("    reminders:\n      every: P1D", "")]
    assert services.check(text).ok


def test_an_appended_step_is_written_in_the_documents_indentation() -> None:
    step = {"id": "look", "type": "human-task", "assignment": {"mode": "group", "value": "ops"}}
    step["decisions"] = [{"name": "ok", "next": "done"}]
    text, _ = services.apply_step(COMMENTED, step, connect_from="manager|decisions/0/next")
    assert _changed_lines(COMMENTED, text) == [
        ("        next: done", "        next: look"),
        (
            "",
            "  - id: look\n    type: human-task\n    assignment:\n      mode: group\n      value: ops\n"
            "    decisions:\n      - name: ok\n        next: done",
        ),
    ]
    assert services.check(text).ok


def test_a_value_the_round_trip_would_read_otherwise_falls_back_to_a_plain_step() -> None:
    step = services.step_of(COMMENTED, "manager")
    assert step is not None
    step["title"] = "yes"  # YAML 1.1 readers take a bare yes for true: the result reads back
    text, _ = services.apply_step(COMMENTED, step, replace="manager")
    assert parse(text, "yaml").data["steps"][1]["title"] == "yes"
    assert text.startswith("# Purchase approval\n") and "  # the manager decides\n" in text
