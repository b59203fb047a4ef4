"""The workflow documents of README.md and docs/*.md, found by scanning the Markdown.

Every fenced ``yaml``/``yml`` block (and every ``json`` block naming a ``definitionId``) is a
whole workflow document, unless the HTML comment right before it (blank lines between are
allowed) says otherwise (docs/development.md, "Documented examples"):

- ``<!-- docs-example: fragment -->``: part of a document (a step, a trigger), not one;
- ``<!-- docs-example: not-a-workflow -->``: YAML of another kind (a Prometheus config);
- ``<!-- docs-example: {"start": {...}, ...} -->``: a whole document and what driving it to its
  end needs (:class:`Example`).

A file that another test executes as a whole is listed in :data:`EXECUTED_ELSEWHERE`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!--\s*docs-example:\s*(.*?)\s*-->", re.S)
BLOCK = re.compile(r"^```(yaml|yml|json)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
FRAGMENT, OTHER = "fragment", "not-a-workflow"
EXECUTED_ELSEWHERE = {
    # applied block by block into a new project, by its own `<!-- guide: ... -->` markers
    "docs/install.md": "tests/test_install_guide.py runs the install guide as written",
}


@dataclass(frozen=True)
class Example:
    """One whole document of the docs and what its driver gives it.

    ``start``: the start payload (default none). ``signals``: signal name -> payload, sent
    whenever a run waits for that signal (default: ``{}``). ``decisions``: human-task step
    id -> ``{"decision", "payload"}`` (default: the step's first decision, no payload).
    ``requires``: definition files (repository paths) loaded into the default scope first, for
    a ``call``. ``end``: the status the run must end in (default ``COMPLETED``)."""

    path: str
    line: int
    text: str
    definition_id: str
    start: Any = None
    signals: dict[str, Any] = field(default_factory=dict)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    end: str = "COMPLETED"

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}:{self.definition_id}"


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    lang: str
    text: str
    marker: str | None  # the comment's text after ``docs-example:``, or None

    @property
    def document(self) -> dict[str, Any] | None:
        """The block as a workflow document (a mapping naming a ``definitionId``), else None."""
        try:
            value = json.loads(self.text) if self.lang == "json" else yaml.safe_load(self.text)
        except (ValueError, yaml.YAMLError):
            return None
        return value if isinstance(value, dict) and "definitionId" in value else None


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks() -> list[Block]:
    found: list[Block] = []
    for path in markdown_files():
        relative = path.relative_to(REPO).as_posix()
        if relative in EXECUTED_ELSEWHERE:
            continue
        source = path.read_text()
        for match in BLOCK.finditer(source):
            # the comment must be the last thing before the block (blank lines aside)
            before = source[: match.start()].rstrip()
            last = before[before.rfind("<!--") :] if before.endswith("-->") else ""
            marker = MARKER.fullmatch(last)
            text = marker.group(1) if marker else None
            lang, body = match.group(1), match.group(2)
            if lang == "json" and "definitionId" not in body:
                continue  # API answers and the like: not documents
            found.append(Block(relative, source[: match.start()].count("\n") + 1, lang, body, text))
    return found


def examples() -> list[Example]:
    """The whole documents (every block not marked as a fragment or another kind of YAML)."""
    found = []
    for block in blocks():
        if block.marker in (FRAGMENT, OTHER):
            continue
        given: dict[str, Any] = json.loads(block.marker) if block.marker else {}
        document = block.document or {}
        found.append(
            Example(
                path=block.path,
                line=block.line,
                text=block.text,
                definition_id=str(document.get("definitionId", "")),
                start=given.get("start"),
                signals=dict(given.get("signals") or {}),
                decisions=dict(given.get("decisions") or {}),
                requires=tuple(given.get("requires") or ()),
                end=str(given.get("end") or "COMPLETED"),
            )
        )
    return found
