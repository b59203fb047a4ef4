"""A plan's graph as an SVG picture, laid out in Python (no JavaScript library).

    render_svg(plan, highlight={"review"}, visited=["route", "review"], counts={"review": 12})

- **Nodes** have the shape their step type names (``StepType.shape`` in
  :mod:`workflows.definitions.steps`: a diamond for a decision, a hexagon for a signal wait,
  a banded box for a human task, ...) and carry their type's label as text as well, so the
  picture does not rely on shape or colour alone.
- **Edges** are the step types' exits a run moves along: ``next``, decision routes and their
  default, a task's decisions and due date, a signal wait's timeout, fork branches,
  ``onFailure`` of joins and calls. Parallel edges between the same two steps are drawn once
  with their labels joined.
- **Layout** is layered, left to right: back edges (loops) are set aside by a depth-first
  search from the initial step, layers are longest paths over what is left, and the order
  within a layer is improved by a few barycentre sweeps to reduce crossings. Loops are drawn
  as arcs under the graph.
- **Highlights**: ``highlight`` are current positions (thick outline, "now" marker);
  ``visited`` the steps a run went through — an ordered sequence also marks the edges taken
  between consecutive steps (or pass ``taken`` pairs explicitly); ``counts`` puts a badge
  with a number on steps (runs parked there, for the Migrate dialog and the dashboard).

The output is a self-contained ``<svg>`` string (its own ``<style>``), safe to insert into a
page: every text is escaped. It is reused by the run viewer, the dashboard, the Migrate
dialog and the designer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from workflows.definitions import plan as p
from workflows.definitions.steps import REGISTRY, exits

NODE_H = 48
LAYER_GAP = 70
ROW_GAP = 28
MARGIN = 24
MIN_W = 104
MAX_W = 196
CHAR_W = 7.4  # average width of a 13px sans-serif character
LABEL_CHARS = 24


@dataclass
class Edge:
    source: str
    target: str
    labels: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    back: bool = False
    waypoints: list[str] = field(default_factory=list)  # layout slots of a long edge


@dataclass
class Node:
    id: str
    type: str
    width: float
    height: float
    layer: int = 0
    x: float = 0.0  # centre
    y: float = 0.0


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def edges_of(plan: p.Plan) -> list[Edge]:
    """Every edge of the plan, parallel edges merged, in a stable order.

    The edges are the exits of the plan's steps (``StepType.exits`` over the normalised spec)
    that a run moves along; a fork's join and a service's compensation are not drawn.
    """
    found: dict[tuple[str, str], Edge] = {}

    def add(source: str, target: str | None, label: str, kind: str) -> None:
        if not target or target not in plan.steps:
            return
        edge = found.setdefault((source, target), Edge(source, target))
        if label and label not in edge.labels:
            edge.labels.append(label)
        edge.kinds.append(kind)

    drawn: set[str] = set()
    for step in plan.spec.get("steps") or ():
        sid = step.get("id")
        if sid not in plan.steps or sid in drawn:
            continue
        drawn.add(sid)
        flow = [e for e in exits(step) if e.flow]
        # ``next`` last: the order the layout's first sweep starts from
        for edge in sorted(flow, key=lambda e: e.kind == "next"):
            add(sid, edge.target, _short(edge.label, 28), edge.kind)
    return list(found.values())


def _order(plan: p.Plan, edges: list[Edge]) -> list[str]:
    """Steps in breadth-first order from the initial step, unreachable ones after."""
    out: dict[str, list[str]] = {}
    for e in edges:
        out.setdefault(e.source, []).append(e.target)
    seen: dict[str, None] = {}
    queue = [plan.initial_step] if plan.initial_step in plan.steps else []
    while queue:
        current = queue.pop(0)
        if current in seen:
            continue
        seen[current] = None
        queue.extend(t for t in out.get(current, []) if t not in seen)
    for sid in plan.steps:
        seen.setdefault(sid, None)
    return list(seen)


def _mark_back_edges(order: list[str], edges: list[Edge]) -> None:
    """Iterative DFS from each root in ``order``: an edge into the current stack is a loop."""
    out: dict[str, list[Edge]] = {}
    for e in edges:
        out.setdefault(e.source, []).append(e)
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for root in order:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            children = out.get(node, [])
            if i >= len(children):
                state[node] = 2
                stack.pop()
                continue
            stack[-1] = (node, i + 1)
            edge = children[i]
            seen = state.get(edge.target)
            if seen == 1:
                edge.back = True
            elif seen is None:
                state[edge.target] = 1
                stack.append((edge.target, 0))


def _layers(order: list[str], edges: list[Edge]) -> dict[str, int]:
    forward = [e for e in edges if not e.back]
    indegree = {sid: 0 for sid in order}
    out: dict[str, list[str]] = {}
    for e in forward:
        indegree[e.target] += 1
        out.setdefault(e.source, []).append(e.target)
    layer = dict.fromkeys(order, 0)
    ready = [sid for sid in order if indegree[sid] == 0]
    while ready:
        current = ready.pop(0)
        for target in out.get(current, []):
            layer[target] = max(layer[target], layer[current] + 1)
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    return layer


# the outlines :func:`_shape` draws (a step type names one as its ``shape``)
SHAPES = (
    "box",
    "diamond",
    "hexagon",
    "fork",
    "join",
    "octagon",
    "parallelogram",
    "clock",
    "pill",
    "double-pill",
    "banded",
    "subroutine",
    "envelope",
    "double-border",
    "dashed",
)
# the width (and height) an outline takes beyond the label's box
_EXTRA = {
    "diamond": (36, 16),
    "hexagon": (20, 0),
    "fork": (20, 0),
    "join": (20, 0),
    "parallelogram": (20, 0),
    "octagon": (20, 0),
    "clock": (28, 0),
}


def _shape_of(step_type: str) -> str:
    kind = REGISTRY.get(step_type)
    return kind.shape if kind is not None else "box"


def _size(step: p.Step) -> tuple[float, float]:
    label = _short(step.id, LABEL_CHARS)
    width = min(MAX_W, max(MIN_W, len(label) * CHAR_W + 32))
    extra_w, extra_h = _EXTRA.get(_shape_of(step.type), (0, 0))
    return width + extra_w, NODE_H + extra_h


def _label_width(edge: Edge) -> float:
    return len(_short(", ".join(edge.labels), 30)) * 6.2 + 12 if edge.labels else 0.0


def layout(plan: p.Plan) -> tuple[dict[str, Node], list[Edge], float, float]:
    """Positions (node centres), edges and the picture's width and height.

    An edge spanning several layers gets a waypoint (a "dummy" slot) in each layer it
    crosses, ordered with the real nodes, so it runs between them rather than through them
    and its label has a place of its own.
    """
    edges = edges_of(plan)
    order = _order(plan, edges)
    _mark_back_edges(order, edges)
    layer_of = _layers(order, edges)
    nodes: dict[str, Node] = {}
    for sid in order:
        w, h = _size(plan.steps[sid])
        nodes[sid] = Node(sid, plan.steps[sid].type, w, h, layer_of[sid])
    count = max(layer_of.values(), default=0) + 1
    columns: list[list[str]] = [[] for _ in range(count)]
    for sid in order:
        columns[layer_of[sid]].append(sid)

    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for n, e in enumerate(edges):
        if e.back:
            continue
        chain = [e.source]
        for layer in range(layer_of[e.source] + 1, layer_of[e.target]):
            dummy = f"\x00{n}:{layer}"  # cannot clash with a step id
            labelled = bool(e.labels) and layer == (layer_of[e.source] + layer_of[e.target]) // 2
            nodes[dummy] = Node(dummy, "", max(16.0, _label_width(e)) if labelled else 16.0, 16.0, layer)
            columns[layer].append(dummy)
            e.waypoints.append(dummy)
            chain.append(dummy)
        chain.append(e.target)
        for a, b in itertools.pairwise(chain):
            preds.setdefault(b, []).append(a)
            succs.setdefault(a, []).append(b)

    def sweep(neighbours: dict[str, list[str]], indices: range) -> None:
        for i in indices:
            position = {sid: n for col in columns for n, sid in enumerate(col)}
            current = columns[i]

            def barycentre(sid: str, current: list[str] = current, position: dict[str, int] = position) -> float:
                near = [position[n] for n in neighbours.get(sid, []) if n in position]
                return sum(near) / len(near) if near else float(current.index(sid))

            columns[i] = sorted(current, key=barycentre)

    for _sweep in range(4):
        sweep(preds, range(1, count))
        sweep(succs, range(count - 2, -1, -1))

    # the gap after a layer leaves room for the labels of the edges that cross it
    gaps = [float(LAYER_GAP)] * count
    for e in edges:
        if not e.back and e.labels and not e.waypoints:
            gaps[layer_of[e.source]] = max(gaps[layer_of[e.source]], min(220.0, _label_width(e) + 36))
    widths = [max((nodes[s].width for s in col), default=MIN_W) for col in columns]
    heights = [sum(nodes[s].height for s in col) + ROW_GAP * max(0, len(col) - 1) for col in columns]
    tallest = max(heights, default=NODE_H)
    x = float(MARGIN)
    for i, col in enumerate(columns):
        y = MARGIN + 14 + (tallest - heights[i]) / 2  # 14: room for the "now" marker
        for sid in col:
            node = nodes[sid]
            node.x = x + widths[i] / 2
            node.y = y + node.height / 2
            y += node.height + ROW_GAP
        x += widths[i] + gaps[i]
    width = x - gaps[-1] + MARGIN
    loops = any(e.back for e in edges)
    height = MARGIN * 2 + 14 + tallest + (44 if loops else 0)
    return nodes, edges, width, height


# --- drawing ---------------------------------------------------------------------------------


def _points(points: Iterable[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def _shape(node: Node) -> str:
    """The outline of a node: the shape its step type names (``StepType.shape``); a box for
    ``box`` and for a shape this module does not know."""
    x, y, w, h = node.x, node.y, node.width, node.height
    left, right, top, bottom = x - w / 2, x + w / 2, y - h / 2, y + h / 2
    t = _shape_of(node.type)
    if t == "diamond":
        return f'<polygon class="wfg-shape" points="{_points([(left, y), (x, top), (right, y), (x, bottom)])}"/>'
    if t == "hexagon":
        d = 14
        pts = [(left, y), (left + d, top), (right - d, top), (right, y), (right - d, bottom), (left + d, bottom)]
        return f'<polygon class="wfg-shape" points="{_points(pts)}"/>'
    if t == "fork":
        d = 16
        pts = [(left, top), (right - d, top), (right, y), (right - d, bottom), (left, bottom)]
        return f'<polygon class="wfg-shape" points="{_points(pts)}"/>'
    if t == "join":
        d = 16
        pts = [(left, top), (right, top), (right, bottom), (left, bottom), (left + d, y)]
        return f'<polygon class="wfg-shape" points="{_points(pts)}"/>'
    if t == "octagon":  # a stop sign
        d = 12
        pts = [
            (left + d, top),
            (right - d, top),
            (right, top + d),
            (right, bottom - d),
            (right - d, bottom),
            (left + d, bottom),
            (left, bottom - d),
            (left, top + d),
        ]
        return f'<polygon class="wfg-shape" points="{_points(pts)}"/>'
    if t == "parallelogram":
        d = 12
        pts = [(left + d, top), (right, top), (right - d, bottom), (left, bottom)]
        return f'<polygon class="wfg-shape" points="{_points(pts)}"/>'
    box = f'x="{left:.1f}" y="{top:.1f}" width="{w:.1f}" height="{h:.1f}"'
    if t in ("clock", "pill", "double-pill"):
        extra = ""
        if t == "clock":  # a clock face at the left end (the node is wider for it)
            cx = left + 18
            hands = _points([(cx, y - 6), (cx, y), (cx + 5, y)])
            extra = (
                f'<circle class="wfg-inner" cx="{cx:.1f}" cy="{y:.1f}" r="9"/>'
                f'<polyline class="wfg-inner" points="{hands}"/>'
            )
        if t == "double-pill":
            extra = (
                f'<rect class="wfg-inner" x="{left + 4:.1f}" y="{top + 4:.1f}" width="{w - 8:.1f}" '
                f'height="{h - 8:.1f}" rx="{(h - 8) / 2:.1f}"/>'
            )
        return f'<rect class="wfg-shape" {box} rx="{h / 2:.1f}"/>{extra}'
    if t == "banded":  # a band down the left side: a person acts here
        return (
            f'<rect class="wfg-shape" {box} rx="8"/>'
            f'<rect class="wfg-band" x="{left + 4:.1f}" y="{top + 6:.1f}" width="5" height="{h - 12:.1f}" rx="2"/>'
        )
    if t == "subroutine":
        return (
            f'<rect class="wfg-shape" {box} rx="3"/>'
            f'<line class="wfg-inner" x1="{left + 7:.1f}" y1="{top:.1f}" x2="{left + 7:.1f}" y2="{bottom:.1f}"/>'
            f'<line class="wfg-inner" x1="{right - 7:.1f}" y1="{top:.1f}" x2="{right - 7:.1f}" '
            f'y2="{bottom:.1f}"/>'
        )
    if t == "envelope":
        return (
            f'<rect class="wfg-shape" {box} rx="3"/>'
            f'<polyline class="wfg-inner" points="{_points([(left, top), (x, top + 12), (right, top)])}"/>'
        )
    if t == "double-border":
        return (
            f'<rect class="wfg-shape" {box} rx="16"/>'
            f'<rect class="wfg-inner" x="{left + 4:.1f}" y="{top + 4:.1f}" width="{w - 8:.1f}" '
            f'height="{h - 8:.1f}" rx="12"/>'
        )
    if t == "dashed":
        return f'<rect class="wfg-shape wfg-dashed" {box} rx="4"/>'
    return f'<rect class="wfg-shape" {box} rx="4"/>'


def _bezier(
    a: tuple[float, float], b: tuple[float, float], c: tuple[float, float], d: tuple[float, float], t: float
) -> tuple[float, float]:
    u = 1 - t
    return (
        u**3 * a[0] + 3 * u * u * t * b[0] + 3 * u * t * t * c[0] + t**3 * d[0],
        u**3 * a[1] + 3 * u * u * t * b[1] + 3 * u * t * t * c[1] + t**3 * d[1],
    )


def _curve(a: tuple[float, float], d: tuple[float, float]) -> tuple[str, tuple[float, float]]:
    bend = max(24.0, (d[0] - a[0]) / 2)
    b, c = (a[0] + bend, a[1]), (d[0] - bend, d[1])
    return f" C{b[0]:.1f},{b[1]:.1f} {c[0]:.1f},{c[1]:.1f} {d[0]:.1f},{d[1]:.1f}", _bezier(a, b, c, d, 0.5)


def _edge_path(
    edge: Edge, nodes: dict[str, Node], floor: float, ceiling: float, edges_of_layer: dict[int, tuple[float, float]]
) -> tuple[str, tuple[float, float]]:
    """The SVG path of an edge and where its label goes."""
    s, t = nodes[edge.source], nodes[edge.target]
    if edge.back or t.layer <= s.layer:
        # a loop runs outside the graph: under it, or over it when something sits under the
        # target (so the arc does not cross that step on its way in)
        top, bottom = edges_of_layer[t.layer]
        over = t.y + t.height / 2 < bottom - 1 and t.y - t.height / 2 <= top + 1
        sign = -1 if over else 1
        a = (s.x, s.y + sign * s.height / 2)
        d = (t.x + (8 if s is t else 0), t.y + sign * (t.height / 2 + 6))
        rail = ceiling if over else floor
        b, c = (a[0], rail), (d[0], rail)
        path = f"M{a[0]:.1f},{a[1]:.1f} C{b[0]:.1f},{b[1]:.1f} {c[0]:.1f},{c[1]:.1f} {d[0]:.1f},{d[1]:.1f}"
        return path, _bezier(a, b, c, d, 0.5)
    start = (s.x + s.width / 2, s.y)
    path = f"M{start[0]:.1f},{start[1]:.1f}"
    label = None
    for slot in edge.waypoints:
        w = nodes[slot]
        entry, leave = (w.x - w.width / 2, w.y), (w.x + w.width / 2, w.y)
        segment, _mid = _curve(start, entry)
        path += segment + f" L{leave[0]:.1f},{leave[1]:.1f}"
        if w.width > 16:
            label = (w.x, w.y)
        start = leave
    segment, middle = _curve(start, (t.x - t.width / 2 - 6, t.y))
    return path + segment, label or middle


STYLE = """
.wfg{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
.wfg-shape{fill:#fff;stroke:#5b6573;stroke-width:1.5}
.wfg-inner{fill:none;stroke:#5b6573;stroke-width:1}
.wfg-band{fill:#5b6573;stroke:none}
.wfg-dashed{stroke-dasharray:5 3}
.wfg-node-complete .wfg-shape{stroke:#1e7b3c;stroke-width:2}
.wfg-node-fail .wfg-shape{stroke:#b42318;stroke-width:2}
.wfg-node-end .wfg-shape{stroke:#1d232b;stroke-width:2}
.wfg-label{font-size:13px;font-weight:600;fill:#1d232b;text-anchor:middle}
.wfg-type{font-size:10px;fill:#5b6573;text-anchor:middle;letter-spacing:.02em}
.wfg-edge{fill:none;stroke:#9aa4b2;stroke-width:1.4}
.wfg-edge-label{font-size:11px;fill:#5b6573;text-anchor:middle}
.wfg-edge-label-bg{fill:#fff;opacity:.9}
.wfg-visited .wfg-shape{fill:#e8f0fc}
.wfg-loop{stroke-dasharray:6 4}
.wfg-taken{stroke:#1f5fbf;stroke-width:2.6}
.wfg-current .wfg-shape{stroke:#1f5fbf;stroke-width:3.5;fill:#fff4d6}
.wfg-now{font-size:11px;font-weight:700;fill:#1f5fbf;text-anchor:middle}
.wfg-badge{fill:#1f5fbf}
.wfg-badge-text{font-size:11px;font-weight:700;fill:#fff;text-anchor:middle}
"""


def render_svg(
    plan: p.Plan,
    *,
    highlight: Iterable[str] = (),
    visited: Iterable[str] = (),
    counts: Mapping[str, int] | None = None,
    taken: Iterable[tuple[str, str]] | None = None,
    href: Callable[[str], str | None] | None = None,
    title: str | None = None,
    marker: str = "",
    id_suffix: str = "",
) -> str:
    """The plan's graph as an ``<svg>`` string (see the module docstring).

    ``visited`` may be an ordered sequence of step ids (consecutive pairs become the edges
    taken, unless ``taken`` gives them); ``href(step_id)`` makes a node a link. ``marker``
    names what a highlight is when it is not a current position (the Migrate dialog's target
    graph: "moves here"); ``id_suffix`` keeps the ids of two pictures of one plan on a page apart.
    """
    nodes, edges, width, height = layout(plan)
    steps = {sid: node for sid, node in nodes.items() if node.type}  # without the layout's waypoints
    current = {s for s in highlight if s in steps}
    sequence = [s for s in visited if s in steps]
    seen = set(sequence)
    if taken is None:
        taken_pairs = {(a, b) for a, b in itertools.pairwise(sequence) if a != b}
    else:
        taken_pairs = {(a, b) for a, b in taken}
    counts = {k: int(v) for k, v in (counts or {}).items() if k in steps and v}
    prefix = "wfg-" + (plan.plan_hash[:10] or "plan") + (f"-{id_suffix}" if id_suffix else "")
    now_text, now_tip, now_desc = (
        (marker, marker, marker[:1].upper() + marker[1:])
        if marker
        else (
            _("now"),
            _("current position"),
            _("Current position"),
        )
    )
    floor = height - MARGIN - 8
    ceiling = 2.0
    extents: dict[int, tuple[float, float]] = {}
    for node in steps.values():
        top, bottom = extents.get(node.layer, (node.y - node.height / 2, node.y + node.height / 2))
        extents[node.layer] = (min(top, node.y - node.height / 2), max(bottom, node.y + node.height / 2))

    name = title or _("%(workflow)s version %(version)s") % {"workflow": plan.definition_id, "version": plan.version}
    desc = [
        ngettext("%(count)s step, starting at %(step)s.", "%(count)s steps, starting at %(step)s.", len(steps))
        % {"count": len(steps), "step": plan.initial_step}
    ]
    if current:
        desc.append(
            _("Current position: %(where)s.") % {"where": ", ".join(sorted(current))}
            if not marker
            else f"{now_desc}: " + ", ".join(sorted(current)) + "."
        )
    if sequence:
        walked = [sequence[0]] + [b for a, b in itertools.pairwise(sequence) if a != b]
        desc.append(_("Path taken: %(steps)s.") % {"steps": " → ".join(walked)})
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="wfg" role="img" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" aria-labelledby="{prefix}-title {prefix}-desc">',
        f'<title id="{prefix}-title">{escape(name)}</title>',
        f'<desc id="{prefix}-desc">{escape(" ".join(desc))}</desc>',
        f"<style>{STYLE}</style>",
        "<defs>",
        f'<marker id="{prefix}-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#9aa4b2"/></marker>',
        f'<marker id="{prefix}-arrow-taken" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#1f5fbf"/></marker>',
        "</defs>",
        '<g class="wfg-edges">',
    ]
    labels: list[str] = []
    for edge in edges:
        path, (mx, my) = _edge_path(edge, nodes, floor, ceiling, extents)
        is_taken = (edge.source, edge.target) in taken_pairs
        cls = "wfg-edge wfg-taken" if is_taken else "wfg-edge"
        if edge.back or nodes[edge.target].layer <= nodes[edge.source].layer:
            cls += " wfg-loop"
        marker = f"{prefix}-arrow-taken" if is_taken else f"{prefix}-arrow"
        parts.append(
            f'<path class="{cls}" d="{path}" marker-end="url(#{marker})" data-source="{escape(edge.source)}" '
            f'data-target="{escape(edge.target)}" data-kind="{escape(" ".join(dict.fromkeys(edge.kinds)))}"/>'
        )
        if edge.labels:
            text = _short(", ".join(edge.labels), 30)
            w = len(text) * 6.2 + 8
            labels.append(
                f'<rect class="wfg-edge-label-bg" x="{mx - w / 2:.1f}" y="{my - 9:.1f}" width="{w:.1f}" height="15" '
                f'rx="3"/><text class="wfg-edge-label" x="{mx:.1f}" y="{my + 2.5:.1f}">{escape(text)}</text>'
            )
    parts.append("</g>")
    parts.append('<g class="wfg-edge-labels">' + "".join(labels) + "</g>")
    parts.append('<g class="wfg-nodes">')
    for sid, node in steps.items():
        classes = ["wfg-node", f"wfg-node-{node.type}"]
        if sid in seen:
            classes.append("wfg-visited")
        if sid in current:
            classes.append("wfg-current")
        kind = str(REGISTRY[node.type].label) if node.type in REGISTRY else node.type
        tip = [f"{sid} ({kind})"]
        if sid in current:
            tip.append(now_tip)
        elif sid in seen:
            tip.append(_("visited"))
        if sid in counts:
            tip.append(_("%(count)s here") % {"count": counts[sid]})
        body = [
            f"<title>{escape(' — '.join(tip))}</title>",
            _shape(node),
            f'<text class="wfg-label" x="{node.x:.1f}" y="{node.y - 1:.1f}">{escape(_short(sid, LABEL_CHARS))}</text>',
            f'<text class="wfg-type" x="{node.x:.1f}" y="{node.y + 13:.1f}">{escape(kind)}</text>',
        ]
        if sid in current:
            top = node.y - node.height / 2 - 5
            body.append(f'<text class="wfg-now" x="{node.x:.1f}" y="{top:.1f}">{escape(now_text)}</text>')
        if sid in counts:
            bx, by = node.x + node.width / 2 - 4, node.y - node.height / 2 + 2
            label = str(counts[sid]) if counts[sid] < 10000 else f"{counts[sid] // 1000}k"
            r = max(10.0, 4 + len(label) * 3.4)
            body.append(
                f'<circle class="wfg-badge" cx="{bx:.1f}" cy="{by:.1f}" r="{r:.1f}"/>'
                f'<text class="wfg-badge-text" x="{bx:.1f}" y="{by + 4:.1f}">{escape(label)}</text>'
            )
        group = (
            f'<g class="{" ".join(classes)}" data-step="{escape(sid)}" data-type="{escape(node.type)}">'
            + "".join(body)
            + "</g>"
        )
        link = href(sid) if href is not None else None
        if link:
            group = f'<a href="{escape(link)}">{group}</a>'
        parts.append(group)
    parts.append("</g></svg>")
    return "".join(parts)


def ordered_path(entries: Iterable[Any]) -> list[str]:
    """Step ids in the order a run went through them, from DECISION rows (``.step``)."""
    path: list[str] = []
    for entry in entries:
        step = entry["step"] if isinstance(entry, Mapping) else getattr(entry, "step", "")
        if step and (not path or path[-1] != step):
            path.append(step)
    return path


__all__ = ["SHAPES", "edges_of", "layout", "ordered_path", "render_svg"]
