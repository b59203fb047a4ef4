"""Named SQL: the engine's statements live in ``.sql`` files beside this module.

The procrastinate pattern. A file holds statements, each under a ``-- name: <identifier>``
header; the comment lines right after the header describe it. ``load("waits")`` reads
``waits.sql`` once and answers a :class:`Statements` whose attributes are the statements'
texts (``SQL.close_park``), ready for ``cursor.execute`` with ``%s`` / ``%(name)s`` parameters.

Two substitutions are made at load time, so a value is written in one place:

- ``{RunStatus.WAITING}`` (any path under ``workflows.models``: ``{Timer.Status.SCHEDULED}``)
  becomes the quoted value of that ``TextChoices`` member (``'WAITING'``); a name that is a
  collection of values (``{LIVE_STATUSES}``) becomes the quoted values, comma separated, in
  sorted order (for ``IN ({LIVE_STATUSES})``).
- ``{@other}`` becomes the text of the statement ``other`` of the same file (a shared column
  list, a common sub-select), so a fragment is written once.

A misspelt name, a duplicate statement or an unknown reference fails at import, not at run time.
Texts are built once per process and the same ``str`` object is answered every time, which the
cursor-shape cache and psycopg's prepared statements key on.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")
_VALUE = re.compile(r"\{([A-Z][A-Za-z0-9_]*(?:\.[A-Za-z][A-Za-z0-9_]*)*)\}")
_INCLUDE = re.compile(r"\{@([a-z_][a-z0-9_]*)\}")


class SQLFileError(Exception):
    """A ``.sql`` file that cannot be loaded (a programming error, raised at import)."""


class Statements:
    """The statements of one file, by name (attribute or item access)."""

    def __init__(self, source: str, texts: dict[str, str]) -> None:
        self._source = source
        self._texts = texts

    def __getattr__(self, name: str) -> str:
        try:
            return self.__dict__["_texts"][name]
        except KeyError:
            raise AttributeError(f"{self.__dict__.get('_source', '?')} has no statement {name!r}") from None

    def __getitem__(self, name: str) -> str:
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __contains__(self, name: object) -> bool:
        return name in self._texts

    def __repr__(self) -> str:
        return f"<Statements {self._source}: {', '.join(self._texts)}>"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _resolve_value(path: str, source: str) -> str:
    from workflows import models  # late: the loader is imported by modules that models import

    target: Any = models
    for part in path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SQLFileError(f"{source}: {{{path}}} names nothing in workflows.models") from None
    if isinstance(target, enum.Enum) and isinstance(target.value, str):
        return _quote(target.value)
    if isinstance(target, str):
        raise SQLFileError(f"{source}: {{{path}}} is a plain string, not a TextChoices member")
    if isinstance(target, Iterable):
        values = sorted(str(v.value if isinstance(v, enum.Enum) else v) for v in target)
        if not values:
            raise SQLFileError(f"{source}: {{{path}}} is empty")
        return ", ".join(_quote(v) for v in values)
    raise SQLFileError(f"{source}: {{{path}}} is neither a TextChoices member nor a collection of values")


def parse(text: str, source: str = "<sql>") -> dict[str, str]:
    """The statements of a file's text, substitutions made (see the module's docstring)."""
    raw: dict[str, list[str]] = {}
    current: list[str] | None = None
    describing = False
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line.strip())
        if header:
            name = header.group(1)
            if name in raw:
                raise SQLFileError(f"{source}:{number}: statement {name!r} is defined twice")
            current = raw[name] = []
            describing = True
            continue
        if current is None:
            if line.strip() and not line.strip().startswith("--"):
                raise SQLFileError(f"{source}:{number}: SQL before the first '-- name:' header")
            continue
        if describing and line.strip().startswith("--"):
            continue  # the statement's description
        describing = False
        current.append(line)

    texts: dict[str, str] = {}

    def build(name: str, stack: tuple[str, ...]) -> str:
        if name in texts:
            return texts[name]
        if name not in raw:
            raise SQLFileError(f"{source}: {{@{name}}} names no statement of this file")
        if name in stack:
            raise SQLFileError(f"{source}: statement {name!r} includes itself")
        body = "\n".join(raw[name]).strip().rstrip(";").strip()
        if not body:
            raise SQLFileError(f"{source}: statement {name!r} is empty")
        body = _INCLUDE.sub(lambda m: build(m.group(1), (*stack, name)), body)
        body = _VALUE.sub(lambda m: _resolve_value(m.group(1), source), body)
        texts[name] = body
        return body

    for name in raw:
        build(name, ())
    return {name: texts[name] for name in raw}


@cache
def load(name: str, directory: Path | str | None = None) -> Statements:
    """The statements of ``<directory>/<name>.sql`` (``workflows/engine/sql`` by default)."""
    folder = Path(directory) if directory is not None else HERE
    path = folder / f"{name}.sql"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SQLFileError(f"no SQL file {path}") from None
    return Statements(path.name, parse(text, path.name))
