"""The plan's graph as SVG: shapes per step type, edges from the plan, highlights, escaping."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from workflows.definitions import catalogs, compile_text
from workflows.presentation.graph import edges_of, layout, render_svg

SVG = "{http://www.w3.org/2000/svg}"

EVERYTHING = """
definitionId: everything
definitionVersion: 1
contract: {name: everything.v1, signals: {go: null}}
stateSchema: {type: object}
startPayloadSchema: {type: object}
initialStep: route
steps:
  - {id: route, type: decision, routes: [{when: "state.total < 5 && state.rush", to: split}], default: review}
  - id: review
    type: human-task
    title: Review
    assignment: {mode: group, value: approvers}
    due: {after: P3D, next: pause}
    decisions:
      - {name: approve, next: go-wait}
      - {name: reject, next: rejected}
  - {id: pause, type: timer, after: PT1H, next: review}
  - {id: go-wait, type: wait-signal, signal: go, next: mail, timeout: {after: P1D, next: stop}}
  - {id: mail, type: email, to: "'ops@example.com'", subject: s, body: b, next: think}
  - {id: think, type: agent, agent: test.graph-agent, next: done}
  - id: split
    type: fork
    branches: [left, right]
    join: gather
  - {id: left, type: service, target: test.graph-noop, next: gather}
  - {id: right, type: script, script: test.graph-script, next: gather}
  - {id: gather, type: join, policy: all, next: done, onFailure: rejected}
  - {id: done, type: complete}
  - {id: rejected, type: fail}
  - {id: stop, type: end}
"""


@pytest.fixture(scope="module")
def plan() -> Any:
    catalogs.callbacks.add("test.graph-noop", lambda payload: None, category="service")
    catalogs.callbacks.add("test.graph-script", lambda input: None, category="script")
    catalogs.callbacks.add("test.graph-agent", lambda input: None, category="agent")
    try:
        yield compile_text(EVERYTHING)
    finally:
        catalogs.callbacks.unregister("test.graph-noop", "service")
        catalogs.callbacks.unregister("test.graph-script", "script")
        catalogs.callbacks.unregister("test.graph-agent", "agent")


def nodes_of(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    return {g.get("data-step"): g for g in root.iter(f"{SVG}g") if g.get("data-step")}


def test_every_kind_of_edge_is_drawn(plan: Any) -> None:
    edges = {(e.source, e.target): set(e.kinds) for e in edges_of(plan)}
    assert edges[("route", "split")] == {"route"}
    assert edges[("route", "review")] == {"default"}
    assert edges[("review", "go-wait")] == {"decision"} and edges[("review", "rejected")] == {"decision"}
    assert edges[("review", "pause")] == {"due"}
    assert edges[("go-wait", "stop")] == {"timeout"}
    assert edges[("split", "left")] == {"branch"} and edges[("split", "right")] == {"branch"}
    assert edges[("gather", "rejected")] == {"failure"}
    assert edges[("pause", "review")] == {"next"}


def _outline(group: ET.Element) -> tuple[Any, ...]:
    """What a person sees of a node's outline: the polygon's form (normalised to its box) or
    the box's roundness, plus the inner marks."""
    shape = next(el for el in group if "wfg-shape" in (el.get("class") or ""))
    extras = tuple(sorted(el.tag.removeprefix(SVG) for el in group if el.get("class") in ("wfg-inner", "wfg-band")))
    dashed = "wfg-dashed" in (shape.get("class") or "")
    if shape.tag == f"{SVG}polygon":
        points = [tuple(map(float, p.split(","))) for p in (shape.get("points") or "").split()]
        xs, ys = [x for x, _ in points], [y for _, y in points]
        form = tuple(
            (round((x - min(xs)) / (max(xs) - min(xs)), 1), round((y - min(ys)) / (max(ys) - min(ys)), 1))
            for x, y in points
        )
        return ("polygon", form, extras, dashed)
    roundness = round(float(shape.get("rx") or 0) / float(shape.get("height") or 1), 1)
    return ("box", roundness, extras, dashed)


def test_each_step_type_has_its_own_shape(plan: Any) -> None:
    nodes = nodes_of(render_svg(plan))
    assert set(nodes) == set(plan.steps)
    outline = {}
    for sid, group in nodes.items():
        outline[plan.steps[sid].type] = _outline(group)
        # the type is written as text too, not only drawn
        assert group.find(f"{SVG}text[@class='wfg-type']") is not None
    assert len(set(outline.values())) == len(outline), outline


def test_layers_run_left_to_right_without_overlaps(plan: Any) -> None:
    nodes, edges, width, height = layout(plan)
    steps = {sid: n for sid, n in nodes.items() if n.type}
    assert min(steps.values(), key=lambda n: n.x).id == "route"
    for e in edges:
        if not e.back:
            assert steps[e.source].x < steps[e.target].x
    for a, b in itertools.combinations(steps.values(), 2):
        apart_x = abs(a.x - b.x) >= (a.width + b.width) / 2
        apart_y = abs(a.y - b.y) >= (a.height + b.height) / 2
        assert apart_x or apart_y, (a.id, b.id)
    assert all(0 < n.x < width and 0 < n.y < height for n in nodes.values())
    assert any(e.back for e in edges)  # pause -> review is a loop


def test_current_positions_path_taken_and_counts_are_marked(plan: Any) -> None:
    svg = render_svg(
        plan, highlight=["go-wait"], visited=["route", "review", "review", "go-wait"], counts={"go-wait": 3}
    )
    nodes = nodes_of(svg)
    assert "wfg-current" in nodes["go-wait"].get("class", "")
    assert {s for s, g in nodes.items() if "wfg-visited" in g.get("class", "")} == {"route", "review", "go-wait"}
    taken = {
        (p.get("data-source"), p.get("data-target"))
        for p in ET.fromstring(svg).iter(f"{SVG}path")
        if "wfg-taken" in (p.get("class") or "")
    }
    assert taken == {("route", "review"), ("review", "go-wait")}
    badge = nodes["go-wait"].find(f"{SVG}text[@class='wfg-badge-text']")
    assert badge is not None and badge.text == "3"
    desc = ET.fromstring(svg).find(f"{SVG}desc")
    assert desc is not None and "Current position: go-wait." in (desc.text or "")
    assert "Path taken: route → review → go-wait." in (desc.text or "")


def test_taken_edges_can_be_given_explicitly(plan: Any) -> None:
    svg = render_svg(plan, visited={"split", "left", "right"}, taken={("split", "left"), ("split", "right")})
    taken = {
        (p.get("data-source"), p.get("data-target"))
        for p in ET.fromstring(svg).iter(f"{SVG}path")
        if "wfg-taken" in (p.get("class") or "")
    }
    assert taken == {("split", "left"), ("split", "right")}


def test_text_is_escaped(plan: Any) -> None:
    svg = render_svg(plan, title="<b>owner's</b> & co")
    assert "state.total &lt; 5 &amp;&amp;" in svg
    assert "<b>" not in svg
    root = ET.fromstring(svg)
    assert root.find(f"{SVG}title").text == "<b>owner's</b> & co"


def test_nodes_can_link(plan: Any) -> None:
    svg = render_svg(plan, href=lambda step: f"/designer/steps/{step}/" if step == "review" else None)
    links = [a.get("href") for a in ET.fromstring(svg).iter(f"{SVG}a")]
    assert links == ["/designer/steps/review/"]
