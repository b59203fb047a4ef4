"""The designer's logic, free of HTTP: check a document, edit its steps, deploy it, compare
revisions, list workflows.

Everything goes through ``workflows.definitions`` (compile, load, publish, activate, next
version) and ``workflows.queries`` (stored text, runs parked per revision); the designer never
touches the engine (an import-linter contract says so).

- :func:`check` compiles a text and answers the plan or every problem with its line.
- :func:`apply_step` writes a step from the step form back into the document. It replaces
  only the lines of the steps it changes (the rest of the document, comments included, is
  left as written); inside a replaced step ruamel.yaml's round trip keeps the step's comments,
  quoting and layout, so only the lines of the values that changed differ.
- :func:`deploy` mints the next version of the scope, loads, publishes and activates it, and
  says how many runs are parked on the revision it replaced (the view then opens the Migrate
  dialog on that pair). Each lifecycle call commits on its own: by the time the dialog opens
  the deploy has committed, and nothing waits on the dialog.
- :func:`compare` diffs two revisions' texts (difflib) and their graphs (steps added, removed
  and changed, from the normalised spec the plan hash covers).
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import yaml
from django.db import connection
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from workflows import conf, definitions, queries
from workflows.definitions import expressions
from workflows.definitions.documents import Document, parse
from workflows.definitions.plan import Plan
from workflows.definitions.reading import parse_duration
from workflows.definitions.steps import exits
from workflows.exceptions import DefinitionError, LifecycleError, Violation, WorkflowError
from workflows.presentation.graph import render_svg

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

LIBRARY = Path(__file__).resolve().parent / "templates_library"
DEPLOY_ATTEMPTS = 3  # a concurrent deploy can take the minted version first: mint again
STEP_ID = re.compile(r"^[A-Za-z0-9_.$-]{1,255}$")


# --- templates ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    slug: str
    title: StrOrPromise  # translated (gettext_lazy): the gallery speaks the reader's language
    summary: StrOrPromise


TEMPLATES: tuple[Template, ...] = (
    Template(
        "approval", gettext_lazy("Approval"), gettext_lazy("One approver from a group approves or rejects a request.")
    ),
    Template(
        "approval-with-escalation",
        gettext_lazy("Approval with escalation"),
        gettext_lazy("Approvers have two days, reminded daily; overdue requests go to managers."),
    ),
    Template(
        "parallel-reviews",
        gettext_lazy("Parallel reviews"),
        gettext_lazy("Legal and finance review at the same time (fork and join)."),
    ),
    Template(
        "purchase-order-review",
        gettext_lazy("Record-triggered review"),
        gettext_lazy("Saving a demo purchase order over 1000 starts a review of it."),
    ),
    Template(
        "saga",
        gettext_lazy("Saga with compensation"),
        gettext_lazy("Reserve stock, then charge; a later failure undoes both."),
    ),
)


def template(slug: str) -> Template | None:
    return next((t for t in TEMPLATES if t.slug == slug), None)


def template_text(slug: str) -> str:
    """The text of a library template; KeyError for an unknown slug (never a path)."""
    if template(slug) is None:
        raise KeyError(slug)
    return (LIBRARY / f"{slug}.yaml").read_text(encoding="utf-8")


# --- checking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One problem as the designer lists it: ``line`` and ``column`` (1-based) say where the
    author looks in the text (a YAML error, a CEL problem; a field's problem has its line)."""

    pointer: str
    type: str
    message: str
    line: int | None
    column: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "pointer": self.pointer,
            "type": self.type,
            "message": self.message,
            "line": self.line,
            "column": self.column,
        }

    def violation(self) -> Violation:
        return Violation(self.pointer, self.type, self.message, self.line, self.column)

    @classmethod
    def of(cls, v: Violation) -> Problem:
        return cls(pointer=v.pointer, type=v.type, message=v.message, line=v.line, column=v.column)


@dataclass
class Check:
    """The outcome of compiling a text: a plan, or every problem (value-free, with lines)."""

    plan: Plan | None
    problems: list[Problem] = field(default_factory=list)
    code: str = ""

    @property
    def ok(self) -> bool:
        return self.plan is not None


def check(text: str) -> Check:
    """Compile ``text`` (YAML; JSON is YAML too) with the definitions compiler."""
    try:
        plan = definitions.compile_text(text, "yaml")
    except DefinitionError as error:
        problems = [Problem.of(v) for v in error.violations] or [Problem("", error.code, error.message, None)]
        problems.sort(key=lambda p: (p.line is None, p.line or 0, p.column or 0))
        return Check(plan=None, problems=problems, code=error.code)
    except WorkflowError as error:
        return Check(plan=None, problems=[Problem("", error.code, error.message, None)], code=error.code)
    return Check(plan=plan)


# --- the live check's bounds ---------------------------------------------------------------------
#
# The live check compiles the whole document on every pause in typing. A maximum-size document
# (256 KiB, ~1,700 steps with a CEL expression each) took 11.7 s and answered 1.4 MB (most of it
# the graph, whose layout is superlinear in the steps). Bounded now: the text's size before any
# parsing (MAX_DOCUMENT_SIZE_BYTES), the CEL compile time, the problems listed, the steps drawn,
# and the number of checks per user and minute (see take_check).

LIVE_CHECK_SECONDS = 2.0
LIVE_MAX_PROBLEMS = 50
MAX_GRAPH_STEPS = 150
TOO_SLOW = gettext_lazy(
    "the document took longer than {seconds:g} s to check here; deploy or validate it to check it whole"
)


def live_check(text: str) -> Check:
    """:func:`check` with the live bounds: a text over the document size limit is refused before
    it is read, compiling stops after LIVE_CHECK_SECONDS of CEL parsing, and at most
    LIVE_MAX_PROBLEMS problems are listed (the last line says how many more there are)."""
    limit = conf.get().DEFINITIONS.MAX_DOCUMENT_SIZE_BYTES
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        return Check(plan=None, problems=[Problem("", "maxLength", f"the document is larger than {limit} bytes", None)])
    found: Check | None = None
    try:
        with expressions.compile_time_limit(LIVE_CHECK_SECONDS) as deadline:
            found = check(text)
    except expressions.CompileTimeExceeded:
        deadline.expired = True
    if deadline.expired or found is None:
        too_slow = str(TOO_SLOW).format(seconds=LIVE_CHECK_SECONDS)
        return Check(plan=None, problems=[Problem("", "timeout", too_slow, None)])
    if len(found.problems) > LIVE_MAX_PROBLEMS:
        more = len(found.problems) - LIVE_MAX_PROBLEMS
        found.problems = [
            *found.problems[:LIVE_MAX_PROBLEMS],
            Problem("", "more", f"and {more} more problems (fix these first)", None),
        ]
    return found


def drawable(plan: Plan) -> bool:
    """Whether the designer draws the plan's graph (its layout grows faster than the steps)."""
    return len(plan.steps) <= MAX_GRAPH_STEPS


@dataclass(frozen=True)
class Refusal:
    """A refused live check: try again after ``retry_after`` seconds."""

    retry_after: int


def take_check(user_id: int) -> Refusal | None:
    """Count one live check against the user's allowance of LIVE_CHECKS_PER_MINUTE (a fixed
    one-minute window in the database, so every web process shares it); None when allowed.

    One upsert: a window older than a minute restarts at one use; the row lock it takes
    serialises a user's concurrent checks, so two processes cannot both take the last use."""
    allowed = conf.get().DEFINITIONS.LIVE_CHECKS_PER_MINUTE
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO designer_checkallowance AS a (user_id, window_start, used)
            VALUES (%s, now(), 1)
            ON CONFLICT (user_id) DO UPDATE SET
                window_start = CASE WHEN a.window_start <= now() - interval '1 minute'
                                    THEN now() ELSE a.window_start END,
                used = CASE WHEN a.window_start <= now() - interval '1 minute'
                            THEN 1 ELSE a.used + 1 END
            RETURNING used, ceil(extract(epoch FROM a.window_start + interval '1 minute' - now()))
            """,
            [user_id],
        )
        used, remaining = cursor.fetchone()
    if used <= allowed:
        return None
    return Refusal(retry_after=max(1, int(remaining or 1)))


def graph_svg(plan: Plan, *, marks: Mapping[str, str] | None = None, title: str | None = None) -> str:
    """The plan's picture (``workflows.presentation.graph``), optionally with steps marked for a diff:
    ``marks`` maps a step id to ``added`` or ``changed``; marked nodes get a ``dsg-<mark>`` class
    (the page styles it and says the same in text)."""
    svg = render_svg(plan, title=title)
    for sid, mark in (marks or {}).items():
        step = plan.steps.get(sid)
        if step is None:
            continue
        opening = f'<g class="wfg-node wfg-node-{step.type}" data-step="{escape(sid)}"'
        svg = svg.replace(opening, f'<g class="wfg-node wfg-node-{step.type} dsg-{mark}" data-step="{escape(sid)}"', 1)
    return svg


CEL_VARIABLES = {
    # the variables each kind of CEL field provides (docs/authoring.md, "Expressions")
    "state": ("state",),
    "when": ("state", "conditions"),  # a decision route: the state and the named conditions
    "payload": ("payload",),
    "signal": ("state", "payload"),
    "decision": ("state", "payload", "decision"),
    "result": ("state", "result"),
    "call": ("state", "result", "status"),
    "join": ("state", "results"),
    "trigger": ("record", "previous", "changed", "event"),
}


def check_expression(source: str, *, variables: str, template: bool = False) -> str | None:
    """The value-free problem of one CEL expression (or ``{{ }}`` template), or None when it
    compiles with the variables its field provides."""
    names = CEL_VARIABLES.get(variables, ("state",))
    try:
        if template:
            expressions.compile_template(source, names)
        else:
            expressions.compile_expression(source, names)
    except expressions.ExpressionCompileError as error:
        return error.problem.message
    return None


# --- minting -----------------------------------------------------------------------------------

MAX_VERSION_EDITS = 4  # JSON keys tried on the version's line before the document is rewritten


def set_version(text: str, version: int) -> str:
    """``text`` with its ``definitionVersion`` set to ``version``, changing only that line
    (a missing field is added after ``definitionId``). Falls back to rewriting the document
    when the field is written in a way a line edit cannot reach.

    The line comes from the parser's line map, not from a search of the text: a search matched
    ``definitionVersion`` inside a string or a block scalar (and rewrote that line instead), and
    its regular expression backtracked quadratically on a long line (33 s for 20,000 spaces).
    Every edit is a hand scan of one line, and is kept only when the edited text reads back as
    the same document with the new version; anything else is dumped whole."""
    document = parse(text, "yaml")
    expected = {**document.data, "definitionVersion": version}
    lines = text.splitlines(keepends=True)
    for candidate in _version_edits(document, lines, version):
        try:
            if parse(candidate, "yaml").data == expected:
                return candidate
        except DefinitionError:
            continue
    return dump(expected)


def _version_edits(document: Document, lines: list[str], version: int) -> Iterable[str]:
    """Candidate texts, each a one-line edit (checked by the caller)."""
    at = document.lines.get("/definitionVersion")
    if at is not None and 0 < at <= len(lines):
        line = lines[at - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        block = _block_value(body, "definitionVersion")
        if block is not None:
            comment = _trailing_comment(block)
            yield _replace_line(lines, at - 1, f"definitionVersion: {version}{comment}{ending}")
        for start, end in _json_values(body, "definitionVersion"):
            yield _replace_line(lines, at - 1, f"{body[:start]}{version}{body[end:]}{ending}")
        return
    at = document.lines.get("/definitionId")
    if at is not None and 0 < at <= len(lines) and _block_value(lines[at - 1].rstrip("\r\n"), "definitionId"):
        line = lines[at - 1]
        ending = line[len(line.rstrip("\r\n")) :]
        newline = ending or ("\r\n" if "\r\n" in "".join(lines[:at]) else "\n")
        edited = list(lines)
        edited[at - 1] = line.rstrip("\r\n") + newline
        edited.insert(at, f"definitionVersion: {version}{ending}")
        yield "".join(edited)


def _replace_line(lines: list[str], index: int, line: str) -> str:
    return "".join([*lines[:index], line, *lines[index + 1 :]])


def _block_value(body: str, key: str) -> str | None:
    """What follows ``key:`` on a top-level block-mapping line, or None for another line."""
    if not body.startswith(key):
        return None
    rest = body[len(key) :].lstrip(" \t")
    return rest[1:] if rest.startswith(":") else None


def _trailing_comment(value: str) -> str:
    """The `` # comment`` ending a plain scalar's line, with its leading blanks (or "")."""
    for index, char in enumerate(value):
        if char == "#" and index > 0 and value[index - 1] in " \t":
            start = index
            while start > 0 and value[start - 1] in " \t":
                start -= 1
            return value[start:]
    return ""


def _json_values(body: str, key: str) -> Iterable[tuple[int, int]]:
    """Spans of the value after each ``"key" :`` on the line (a number, a string, a literal)."""
    quoted = f'"{key}"'
    position = 0
    for _attempt in range(MAX_VERSION_EDITS):
        found = body.find(quoted, position)
        if found < 0:
            return
        position = found + len(quoted)
        i = position
        while i < len(body) and body[i] in " \t":
            i += 1
        if i >= len(body) or body[i] != ":":
            continue
        i += 1
        while i < len(body) and body[i] in " \t":
            i += 1
        end = i
        if end < len(body) and body[end] == '"':
            closing = body.find('"', end + 1)
            if closing < 0:
                continue
            end = closing + 1
        else:
            while end < len(body) and body[end] not in ",}] \t":
                end += 1
        if end > i:
            yield i, end


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key, as people write them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump(data: Any) -> str:
    """YAML that the strict 1.2 reader reads back as ``data`` (PyYAML quotes every string a
    YAML 1.1 reader would take for something else, which covers 1.2)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)


# --- listing -----------------------------------------------------------------------------------


@dataclass
class Revision:
    version: int
    status: str
    plan_hash: str
    created_at: Any
    published_at: Any
    parked: int = 0
    current: bool = False


@dataclass
class Workflow:
    scope: str
    definition_id: str
    current_version: int | None = None
    current_target_scope: str | None = None
    revisions: list[Revision] = field(default_factory=list)

    @property
    def parked(self) -> int:
        return sum(r.parked for r in self.revisions)

    @property
    def latest(self) -> Revision | None:
        return self.revisions[-1] if self.revisions else None


def workflows(*, scope: str | None = None, definition_id: str | None = None) -> list[Workflow]:
    """Every workflow (scope, id) with its revisions (status, runs parked on each) and the
    version its scope's activation record selects."""
    found: dict[tuple[str, str], Workflow] = {}
    for record in definitions.list(scope=scope, definition_id=definition_id):
        wf = found.setdefault(
            (record.scope, record.definition_id), Workflow(scope=record.scope, definition_id=record.definition_id)
        )
        wf.revisions.append(
            Revision(
                version=record.version,
                status=record.status,
                plan_hash=record.plan_hash,
                created_at=record.created_at,
                published_at=record.published_at,
            )
        )
    for activation in definitions.activations(scope=scope):
        wf_or_none = found.get((activation.scope, activation.definition_id))
        if wf_or_none is not None:
            wf_or_none.current_version = activation.version
            wf_or_none.current_target_scope = activation.target_scope
    ids = sorted({wf.definition_id for wf in found.values()})
    for definition_id_ in ids:
        parked = queries.parked_by_version(definition_id=definition_id_)
        for (scope_, version), count in parked.items():
            wf_or_none = found.get((scope_, definition_id_))
            if wf_or_none is None:
                continue
            for revision in wf_or_none.revisions:
                if revision.version == version:
                    revision.parked = count
    for wf in found.values():
        wf.revisions.sort(key=lambda r: r.version)
        for revision in wf.revisions:
            revision.current = wf.current_target_scope == wf.scope and revision.version == wf.current_version
    return sorted(found.values(), key=lambda w: (w.definition_id, w.scope))


def workflow(scope: str, definition_id: str) -> Workflow | None:
    found = workflows(scope=scope, definition_id=definition_id)
    return found[0] if found else None


def revision_text(scope: str, definition_id: str, version: int) -> str:
    """The stored text of a revision (DEFINITION_MISSING when there is none)."""
    text, _format = queries.definition_text(scope=scope, definition_id=definition_id, version=version)
    return text


def next_version(scope: str, definition_id: str) -> int:
    return definitions.next_version(scope=scope, definition_id=definition_id)


# --- deploying ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployed:
    scope: str
    definition_id: str
    version: int
    replaced: int | None  # the version the scope's activation selected before, if any
    parked_on_replaced: int

    @property
    def opens_migrate(self) -> bool:
        return self.replaced is not None and self.replaced != self.version and self.parked_on_replaced > 0


def current_version(scope: str, definition_id: str) -> int | None:
    """The version of the scope itself its activation record selects (None: no record, or a
    record that follows the default scope)."""
    return _replaced_version(scope, definition_id)


def _replaced_version(scope: str, definition_id: str) -> int | None:
    for activation in definitions.activations(scope=scope):
        if activation.definition_id == definition_id and activation.target_scope == scope:
            return activation.version
    return None


class UnchangedDocument(WorkflowError):
    """The document is the revision the scope already runs: deploying it would mint a copy."""

    code = "UNCHANGED"
    status = 409

    def __init__(self, version: int) -> None:
        super().__init__(f"the document is the same as version {version}, which the scope already runs")
        self.version = version


def _runs_already(text: str, scope: str, definition_id: str, version: int) -> bool:
    """Whether ``text`` is the stored document of that version but for ``definitionVersion``
    (comments, spacing, key order and the stored format do not count)."""
    try:
        stored, stored_format = queries.definition_text(scope=scope, definition_id=definition_id, version=version)
        left, right = dict(parse(text, "yaml").data), dict(parse(stored, stored_format).data)
    except WorkflowError:
        return False
    left.pop("definitionVersion", None)
    right.pop("definitionVersion", None)
    return left == right


def deploy(*, scope: str, text: str, username: str = "") -> Deployed:
    """Validate, mint the next version of the scope, load, publish and activate it.

    Raises ``DefinitionError`` with every problem when the text does not compile (nothing is
    stored), and the lifecycle's typed errors otherwise (CONTRACT_MISMATCH, ...). A load that
    finds its minted version taken by a concurrent deploy mints again. A publication that
    fails leaves the loaded version a CANDIDATE (the next deploy mints past it). A document
    that is the version the scope already runs (but for its ``definitionVersion``) is refused
    with UNCHANGED: nothing is minted (an older version's document is deployed: that is a revert).
    """
    found = check(text)
    if found.plan is None:
        raise DefinitionError(
            "the document is not valid",
            violations=[p.violation() for p in found.problems],
            code=found.code or None,
        )
    definition_id = found.plan.definition_id
    replaced = _replaced_version(scope, definition_id)
    if replaced is not None and _runs_already(text, scope, definition_id, replaced):
        raise UnchangedDocument(replaced)  # nothing to deploy: no new version, nothing activated
    metadata = {"source_type": "designer", "source_author": username[:255]}
    record = None
    for attempt in range(DEPLOY_ATTEMPTS):
        version = definitions.next_version(scope=scope, definition_id=definition_id)
        minted = set_version(text, version)
        try:
            record = definitions.load(scope=scope, text=minted, format="yaml", metadata=metadata)
        except LifecycleError as error:
            if error.code == "VERSION_EXISTS" and attempt + 1 < DEPLOY_ATTEMPTS:
                continue
            raise
        break
    assert record is not None
    definitions.publish(scope=scope, definition_id=definition_id, version=record.version)
    definitions.activate(
        scope=scope, definition_id=definition_id, version=record.version, target_scope=scope, updated_by=username
    )
    parked = 0
    if replaced is not None and replaced != record.version:
        parked = queries.parked_by_version(definition_id=definition_id).get((scope, replaced), 0)
    return Deployed(scope, definition_id, record.version, replaced, parked)


def migrate_url(scope: str, definition_id: str, source: int, target: int) -> str:
    """The Migrate dialog (``workflows:migrate:dialog``) with ``source`` and ``target`` selected."""
    query = urlencode({"source": source, "target": target})
    return f"{reverse('workflows:migrate:dialog', args=(scope, definition_id))}?{query}"


# --- comparing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffRow:
    kind: str  # equal | replace | delete | insert | skip
    left_no: int | None
    left: str
    right_no: int | None
    right: str


@dataclass
class StepChange:
    id: str
    type: str
    fields: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    rows: list[DiffRow]
    added: list[StepChange]
    removed: list[StepChange]
    changed: list[StepChange]
    left_svg: str | None
    right_svg: str | None
    left_problem: str | None
    right_problem: str | None

    @property
    def same_text(self) -> bool:
        return all(r.kind == "equal" for r in self.rows)


def text_diff(left: str, right: str, *, context: int = 3) -> list[DiffRow]:
    """Side-by-side rows of a line diff, unchanged stretches cut to ``context`` lines."""
    a, b = left.splitlines(), right.splitlines()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    rows: list[DiffRow] = []
    groups = list(matcher.get_grouped_opcodes(context))
    if not groups:  # identical texts
        return [DiffRow("equal", i + 1, line, i + 1, line) for i, line in enumerate(a)]
    for index, group in enumerate(groups):
        if index or group[0][1] > 0:
            rows.append(DiffRow("skip", None, "", None, ""))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                pairs = zip(range(i1, i2), range(j1, j2), strict=True)
                rows.extend(DiffRow("equal", i + 1, a[i], j + 1, b[j]) for i, j in pairs)
                continue
            left_lines, right_lines = list(range(i1, i2)), list(range(j1, j2))
            for k in range(max(len(left_lines), len(right_lines))):
                li = left_lines[k] if k < len(left_lines) else None
                rj = right_lines[k] if k < len(right_lines) else None
                kind = "replace" if li is not None and rj is not None else ("delete" if li is not None else "insert")
                rows.append(
                    DiffRow(
                        kind,
                        li + 1 if li is not None else None,
                        a[li] if li is not None else "",
                        rj + 1 if rj is not None else None,
                        b[rj] if rj is not None else "",
                    )
                )
    last = groups[-1][-1]
    if last[2] < len(a) or last[4] < len(b):
        rows.append(DiffRow("skip", None, "", None, ""))
    return rows


def _spec_steps(plan: Plan) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in plan.spec.get("steps", []) if isinstance(s, dict) and s.get("id")}


def graph_diff(left: Plan, right: Plan) -> tuple[list[StepChange], list[StepChange], list[StepChange]]:
    """Steps added, removed and changed from ``left`` to ``right`` (by id; a step is changed
    when its normalised spec differs, and the changed top-level fields are named)."""
    a, b = _spec_steps(left), _spec_steps(right)
    added = [StepChange(sid, str(b[sid].get("type", ""))) for sid in b if sid not in a]
    removed = [StepChange(sid, str(a[sid].get("type", ""))) for sid in a if sid not in b]
    changed = []
    for sid in b:
        if sid in a and a[sid] != b[sid]:
            keys = sorted(set(a[sid]) | set(b[sid]))
            fields = [k for k in keys if a[sid].get(k) != b[sid].get(k)]
            changed.append(StepChange(sid, str(b[sid].get("type", "")), fields))
    return added, removed, changed


def compare(left_text: str, right_text: str, *, left_title: str, right_title: str) -> Comparison:
    left, right = check(left_text), check(right_text)
    added: list[StepChange] = []
    removed: list[StepChange] = []
    changed: list[StepChange] = []
    if left.plan is not None and right.plan is not None:
        added, removed, changed = graph_diff(left.plan, right.plan)
    left_marks = {s.id: "removed" for s in removed} | {s.id: "changed" for s in changed}
    right_marks = {s.id: "added" for s in added} | {s.id: "changed" for s in changed}
    return Comparison(
        rows=text_diff(left_text, right_text),
        added=added,
        removed=removed,
        changed=changed,
        left_svg=graph_svg(left.plan, marks=left_marks, title=left_title) if left.plan else None,
        right_svg=graph_svg(right.plan, marks=right_marks, title=right_title) if right.plan else None,
        left_problem=None if left.plan else _("this revision no longer compiles here"),
        right_problem=None if right.plan else _("this revision no longer compiles here"),
    )


# --- editing steps -----------------------------------------------------------------------------


class EditRefused(Exception):
    """A step edit that cannot be written into the document (value-free message)."""


# The exits "connect from" can take over (``StepType.exits``), and how the form names them;
# a fork's branches and join and a service's compensation are not offered.
_SLOT_WORDS = {
    "next": gettext_lazy("next"),
    "default": gettext_lazy("default"),
    "due": gettext_lazy("when due"),
    "timeout": gettext_lazy("on timeout"),
    "failure": gettext_lazy("on failure"),
}


def outgoing_slots(step: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(slot, label, current target) for each place a step names its successor."""
    slots: list[tuple[str, str, str]] = []
    sid = str(step.get("id", ""))
    for edge in exits(step):
        slot = edge.pointer[1:]
        if edge.kind == "route":
            words = _("route %(number)d") % {"number": int(slot.split("/")[1]) + 1}
        elif edge.kind == "decision":
            index = int(slot.split("/")[1])
            name = step["decisions"][index].get("name")
            words = _("decision %(name)s") % {"name": name if isinstance(name, str) else index + 1}
        elif edge.kind in _SLOT_WORDS:
            words = str(_SLOT_WORDS[edge.kind])
        else:
            continue
        slots.append((slot, f"{sid} → {words}", edge.target))
    return slots


def _set_slot(step: dict[str, Any], slot: str, target: str) -> None:
    parts = slot.split("/")
    holder: Any = step
    for part in parts[:-1]:
        holder = holder[int(part)] if isinstance(holder, list) else holder[part]
    holder[parts[-1]] = target


@dataclass(frozen=True)
class Outline:
    """What the step form needs to know about a document: its steps and their slots."""

    steps: list[dict[str, Any]]
    slots: list[tuple[str, str, str]]  # (step id + "|" + slot, label, current target)

    @property
    def ids(self) -> list[str]:
        return [str(s.get("id")) for s in self.steps if isinstance(s.get("id"), str)]


def outline(text: str) -> Outline | None:
    """The steps of a document that parses (None when it does not)."""
    try:
        document = parse(text, "yaml")
    except DefinitionError:
        return None
    steps = document.data.get("steps") if isinstance(document.data, dict) else None
    if not isinstance(steps, list):
        return Outline([], [])
    found = [s for s in steps if isinstance(s, dict)]
    slots = [(f"{s.get('id')}|{slot}", label, target) for s in found for slot, label, target in outgoing_slots(s)]
    return Outline(found, slots)


def step_of(text: str, step_id: str) -> dict[str, Any] | None:
    found = outline(text)
    if found is None:
        return None
    return next((dict(s) for s in found.steps if s.get("id") == step_id), None)


def _step_block(document: Document, lines: list[str], index: int, count: int) -> tuple[int, int]:
    """0-based [start, end) line range of step ``index``: from its ``-`` line to the line
    before the next step (or the next top-level field), without trailing blank or comment
    lines (they introduce what follows)."""
    start = document.lines[f"/steps/{index}"] - 1
    if index + 1 < count:
        end = document.lines[f"/steps/{index + 1}"] - 1
    else:
        end = len(lines)
        steps_line = document.lines.get("/steps", 0)
        for pointer, line in document.lines.items():
            if pointer.count("/") == 1 and pointer != "/steps" and line > steps_line and line - 1 > start:
                end = min(end, line - 1)
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return start, end


_ITEM = re.compile(r"^(\s*)-(\s+)")


def _render_step(step: Mapping[str, Any], indent: str) -> list[str]:
    body = dump([dict(step)]).splitlines()
    # PyYAML writes "- key: value" with continuation lines indented by two spaces
    return [indent + line for line in body]


# --- round-trip rendering of one step (ruamel.yaml) --------------------------------------------
#
# The step form knows a step as plain values. Written back with a plain dumper, the step's own
# comments, key order, quoting and flow style were lost (issue #30). Instead the step's lines are
# read with ruamel.yaml's round-trip loader, the new values are merged into what it read (a value
# that did not change keeps its node, so its comment and quoting stay; a new key comes last), and
# the result is dumped with the indentation the step was written in. The caller keeps the text only
# when it reads back as the intended document.


def _indentation(block: list[str], item: re.Match[str]) -> tuple[int, int, int]:
    """(mapping, sequence, offset) for ruamel's ``indent()``, as this step's lines use them."""
    gap = 1 + len(item.group(2))  # "- " -> 2: from a sequence's dash to its item's content
    mapping, offset = 2, 0
    found_mapping = found_sequence = False
    for this, following in itertools.pairwise(block):
        body = this.rstrip()
        if not body.endswith(":") or body.lstrip().startswith("#"):
            continue
        key_column = len(this) - len(this.lstrip())
        if body.lstrip().startswith("- "):
            key_column += 1 + len(body.lstrip()[1:]) - len(body.lstrip()[1:].lstrip())
        column = len(following) - len(following.lstrip())
        if following.lstrip().startswith("-") and not found_sequence:
            offset, found_sequence = max(0, column - key_column), True
        elif following.strip() and not following.lstrip().startswith("#") and not found_mapping:
            mapping, found_mapping = max(1, column - key_column), True
    return mapping, offset + gap, offset


def _round_trip_yaml(mapping: int, sequence: int, offset: int) -> Any:
    from ruamel.yaml import YAML

    yaml_rt = YAML(typ="rt")
    yaml_rt.preserve_quotes = True
    yaml_rt.width = 4096  # never fold a long line the author wrote on one
    yaml_rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml_rt


def _merge(old: Any, new: Any) -> Any:
    """``new``'s values in ``old``'s nodes: unchanged values keep their node (comment, quotes)."""
    if isinstance(old, dict) and isinstance(new, Mapping):
        for key in [k for k in old if k not in new]:
            del old[key]
        for key, value in new.items():
            if key in old:
                merged = _merge(old[key], value)
                if merged is not old[key]:
                    old[key] = merged
            else:
                old[key] = _plain(value)
        return old
    if isinstance(old, list) and isinstance(new, list):
        for index, value in enumerate(new):
            if index < len(old):
                merged = _merge(old[index], value)
                if merged is not old[index]:
                    old[index] = merged
            else:
                old.append(_plain(value))
        del old[len(new) :]
        return old
    if type(new) is not bool and type(old) is not bool and isinstance(old, str | int | float) and old == new:
        return old
    if type(old) is bool and type(new) is bool and old == new:
        return old
    return _plain(new)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _render_step_in_place(block: list[str], step: Mapping[str, Any], indent: str) -> list[str] | None:
    """The step's lines with ``step``'s values, written as the lines ``block`` were (None when
    ruamel.yaml cannot read or write them: the caller falls back to a plain dump)."""
    from io import StringIO

    item = _ITEM.match(block[0]) if block else None
    if item is None:
        return None
    bare = [line.rstrip("\r\n") for line in block]
    mapping, sequence, offset = _indentation(bare, item)
    # ruamel.yaml writes the root sequence at its offset and keeps comments at their columns:
    # give it the lines at that offset so columns come back where the author put them
    fed = [" " * offset + (line[len(indent) :] if line.startswith(indent) else line.lstrip()) for line in bare]
    try:
        yaml_rt = _round_trip_yaml(mapping, sequence, offset)
        node = yaml_rt.load("".join(line + "\n" for line in fed))
        if not isinstance(node, list) or len(node) != 1 or not isinstance(node[0], dict):
            return None
        node[0] = _merge(node[0], step)
        out = StringIO()
        yaml_rt.dump(node, out)
    except Exception:  # noqa: BLE001  (any failure of the round trip: the plain dump still works)
        return None
    rendered = [indent + line[offset:] if line.strip() else "" for line in out.getvalue().splitlines()]
    return _keep_spacing(bare, rendered)


def _keep_spacing(before: list[str], after: list[str]) -> list[str]:
    """``after`` with each line that differs from its counterpart in ``before`` only in blanks
    (ruamel.yaml normalises the spaces of flow collections) put back as it was written. The
    caller's read-back check catches a change that was only in blanks."""
    result = list(after)
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, a1, a2, b1, b2 in matcher.get_opcodes():
        if tag == "replace" and a2 - a1 == b2 - b1:
            for old, index in zip(before[a1:a2], range(b1, b2), strict=True):
                if old.split() == after[index].split():
                    result[index] = old
    return result


def _appended_step(steps_lines: list[str], step: Mapping[str, Any], indent: str) -> list[str] | None:
    """A new step written in the indentation of the document's steps (None: plain dump)."""
    from io import StringIO

    item = _ITEM.match(steps_lines[0]) if steps_lines else None
    if item is None:
        return None
    mapping, sequence, offset = _indentation([line.rstrip("\r\n") for line in steps_lines], item)
    try:
        out = StringIO()
        _round_trip_yaml(mapping, sequence, offset).dump([_plain(step)], out)
    except Exception:  # noqa: BLE001  (any failure of the round trip: the plain dump still works)
        return None
    return [indent + line[offset:] if line.strip() else "" for line in out.getvalue().splitlines()]


def apply_step(
    text: str,
    step: Mapping[str, Any],
    *,
    replace: str | None = None,
    connect_from: str | None = None,
) -> tuple[str, bool]:
    """Write ``step`` into the document: replace the step with id ``replace``, or append it.

    ``connect_from`` (``"<step id>|<slot>"``, see :func:`outgoing_slots`) makes that slot
    lead to the new step. Answers ``(new text, rewritten)``: ``rewritten`` is True when the
    document had to be dumped whole (its steps are not block items a line edit can reach), which
    drops its comments. Raises :class:`EditRefused` when the document does not parse.
    """
    try:
        document = parse(text, "yaml")
    except DefinitionError:
        raise EditRefused(_("fix the document so it reads as YAML first; the form edits a readable document")) from None
    data = document.data
    if not isinstance(data, dict):
        raise EditRefused(_("the document is not a mapping of fields"))
    steps = data.get("steps")
    if steps is None:
        steps = []
    if not isinstance(steps, list):
        raise EditRefused(_("the document's steps are not a list"))
    new_id = step.get("id")
    index_of = {s.get("id"): i for i, s in enumerate(steps) if isinstance(s, dict)}
    if replace is not None and replace not in index_of:
        raise EditRefused(_("the step to edit is no longer in the document"))
    if new_id in index_of and new_id != replace:
        raise EditRefused(_("another step already has this id"))

    changes: dict[int, dict[str, Any]] = {}  # index -> new step; len(steps) = append
    target_index = index_of[replace] if replace is not None else len(steps)
    changes[target_index] = dict(step)
    if connect_from:
        source_id, _bar, slot = connect_from.partition("|")
        if source_id not in index_of:
            raise EditRefused(_("the step to connect from is no longer in the document"))
        source = steps[index_of[source_id]]
        if slot not in {s for s, _label, _target in outgoing_slots(source)}:
            raise EditRefused(_("the step to connect from has no such exit"))
        source_index = index_of[source_id]
        updated = changes.get(source_index, _deep_copy(source))
        _set_slot(updated, slot, str(new_id))
        changes[source_index] = updated

    lines = text.splitlines(keepends=True)
    newline = "\r\n" if text.count("\r\n") > text.count("\n") / 2 else "\n"
    block_items = bool(steps) and all(
        f"/steps/{i}" in document.lines and _ITEM.match(lines[document.lines[f"/steps/{i}"] - 1])
        for i in range(len(steps))
    )
    if not block_items or "/steps" not in document.lines:
        new_steps = list(steps)
        for index, value in changes.items():
            if index == len(new_steps):
                new_steps.append(value)
            else:
                new_steps[index] = value
        data = dict(data)
        data["steps"] = new_steps
        return dump(data), True

    first = _ITEM.match(lines[document.lines["/steps/0"] - 1])
    assert first is not None
    indent = first.group(1)
    expected = {**data, "steps": [changes.get(i, s) for i, s in enumerate(steps)]}
    if len(steps) in changes:
        expected["steps"].append(changes[len(steps)])
    edited = _splice_steps(document, lines, steps, changes, indent, newline, in_place=True)
    try:
        if parse(edited, "yaml").data == expected:
            return edited, False
    except DefinitionError:
        pass
    # the round trip wrote something that reads otherwise (a value ruamel.yaml and the strict
    # reader take differently): the step's lines as a plain dump, which reads back exactly
    return _splice_steps(document, lines, steps, changes, indent, newline, in_place=False), False


def _splice_steps(
    document: Document,
    original: list[str],
    steps: list[Any],
    changes: Mapping[int, Mapping[str, Any]],
    indent: str,
    newline: str,
    *,
    in_place: bool,
) -> str:
    """The text with the changed steps' lines replaced (and a new step appended); every other
    line stays as written."""
    lines = list(original)
    # replace from the bottom up so earlier line numbers stay valid
    for index in sorted(changes, reverse=True):
        if index == len(steps):
            start, end = _step_block(document, lines, len(steps) - 1, len(steps))
            every_step = lines[document.lines["/steps/0"] - 1 : end]
            body = _appended_step(every_step, changes[index], indent) if in_place else None
            rendered = [line + newline for line in body or _render_step(changes[index], indent)]
            blank = [newline] if any(not ln.strip() for ln in lines[document.lines["/steps/0"] - 1 : end]) else []
            if end and not lines[end - 1].endswith(("\n", "\r")):
                lines[end - 1] += newline
            lines[end:end] = blank + rendered
        else:
            start, end = _step_block(document, lines, index, len(steps))
            body = _render_step_in_place(lines[start:end], changes[index], indent) if in_place else None
            rendered = [line + newline for line in body or _render_step(changes[index], indent)]
            lines[start:end] = rendered
    return "".join(lines)


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def is_duration(text: str) -> bool:
    return parse_duration(text) is not None


def problems_for_lines(problems: Iterable[Problem]) -> list[dict[str, Any]]:
    """Problems as the editor marks them (line, column when known, and message)."""
    return [{"line": p.line, "column": p.column, "message": p.message} for p in problems if p.line]
