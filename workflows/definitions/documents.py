"""Strict reading of a definition document (YAML or JSON) into plain data.

What is refused, each as a value-free violation (pointer, type, line, column):

- a source larger than ``WORKFLOWS["DEFINITIONS"]["MAX_DOCUMENT_SIZE_BYTES"]`` (checked on the
  UTF-8 bytes *before* anything is parsed);
- a malformed encoding (YAML is UTF-8; JSON is UTF-8/16/32 and its byte-order mark is
  consumed), a decoded NUL character and unpaired surrogates, anywhere in the text or in a
  decoded string value (``"\\u0000"`` in JSON);
- YAML aliases, explicit tags, duplicate keys, non-scalar keys, several documents, NaN and
  infinities; JSON duplicate keys, ``NaN`` / ``Infinity``.

YAML is read with the YAML 1.2 core schema (``on``/``yes``/``no`` are strings, dates stay
text), so a document means the same in YAML and JSON. The stored text is the decoded source
exactly: comments, whitespace and line endings are kept, and ``digest`` is the SHA-256 of its
UTF-8 bytes. ``lines`` maps RFC 6901 pointers to 1-based source lines (for the designer), and
``scalars`` where each text value starts, so :meth:`Document.position` can turn a place in an
expression into a line and column of the source. A YAML syntax error says the parser's reason
in words, with the line and column (1-based) where it noticed it: an author fixes the text
without guessing.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import BaseConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from workflows import conf, jsonvalues
from workflows.definitions.names import safe_pointer
from workflows.exceptions import DefinitionError, Violation

FORMATS = ("yaml", "json")
_SURROGATE_OR_NUL = re.compile("[\x00\ud800-\udfff]")


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Document:
    data: dict[str, Any]
    text: str
    format: str
    digest: str
    lines: Mapping[str, int] = field(default_factory=dict)
    scalars: Mapping[str, tuple[int, int, str]] = field(default_factory=dict)

    def position(self, pointer: str, offset: int) -> tuple[int, int] | None:
        """The source (line, column) of the 1-based character ``offset`` of the text value at
        ``pointer``: for a plain or quoted value on one line and for a literal block (``|``);
        None for other styles (folded, escapes), whose characters do not map one to one."""
        found = self.scalars.get(pointer)
        if found is None:
            return None
        line, column, style = found
        value = self.data_at(pointer)
        if not isinstance(value, str) or not 0 < offset <= len(value) + 1:
            return None
        before = value[: offset - 1]
        if style == "|":
            rows = self.text.splitlines()
            first = next((n for n in range(line, len(rows)) if rows[n].strip()), None)
            if first is None:
                return None
            indent = len(rows[first]) - len(rows[first].lstrip(" "))
            return line + 1 + before.count("\n"), indent + len(before) - before.rfind("\n")
        if "\n" in value or style not in ("", "'", '"'):
            return None
        source = self.text.splitlines()[line - 1][column - 1 :]
        inner = source[len(style) :]
        if not inner.startswith(value):  # escapes ('' or \"): characters shift
            return None
        return line, column + len(style) + offset - 1

    def locate(self, violation: Violation) -> Violation:
        """``violation`` with its source line (of its pointer, or its nearest recorded parent)
        and, for a problem at a character of an expression, that character's line and column."""
        found = None
        if violation.expression_column is not None and violation.column is None:
            found = self.position(violation.pointer, violation.expression_column)
        if found is not None:
            return replace(violation, line=found[0], column=found[1])
        if violation.line is not None:
            return violation
        return replace(violation, line=self.line(violation.pointer))

    def data_at(self, pointer: str) -> Any:
        """The value at an RFC 6901 ``pointer`` of :attr:`data`, or None."""
        value: Any = self.data
        for token in pointer.split("/")[1:] if pointer else ():
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(value, dict):
                value = value.get(token)
            elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
                value = value[int(token)]
            else:
                return None
        return value

    def line(self, pointer: str) -> int | None:
        """The line of ``pointer``, or of its nearest parent the source records."""
        while True:
            if pointer in self.lines:
                return self.lines[pointer]
            if not pointer:
                return None
            pointer = pointer.rsplit("/", 1)[0]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- YAML 1.2 core schema, strict ------------------------------------------------------------


class _CoreResolver(BaseResolver):
    pass


_CoreResolver.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_CoreResolver.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_CoreResolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_CoreResolver.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)


class _AliasRefused(Exception):
    def __init__(self, line: int, column: int):
        self.line = line
        self.column = column


class _TooDeep(Exception):
    pass


# Far below the interpreter's recursion limit: a document nested deeper is refused at once,
# instead of after the composer recursed a thousand levels (which took a second).
MAX_YAML_DEPTH = 128


class _StrictComposer(Composer):
    """Refuses aliases (and with them alias bombs) instead of resolving them, and documents
    nested deeper than ``MAX_YAML_DEPTH``."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        parser: Any = self  # the Parser mixin of the loader provides the event methods
        if parser.check_event(AliasEvent):
            mark = parser.peek_event().start_mark
            raise _AliasRefused(mark.line + 1, mark.column + 1)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _TooDeep()
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _BoundedScanner(Scanner):
    """Refuses flow collections (``[`` ``{``) nested deeper than ``MAX_YAML_DEPTH`` as it meets
    them: PyYAML's scanner slows down quadratically with flow depth, before any node exists."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        if self.flow_level >= MAX_YAML_DEPTH:
            raise _TooDeep()
        super().fetch_flow_collection_start(TokenClass)  # type: ignore[misc]


class _StrictLoader(Reader, _BoundedScanner, Parser, _StrictComposer, BaseConstructor, _CoreResolver):
    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        _BoundedScanner.__init__(self)
        Parser.__init__(self)
        _StrictComposer.__init__(self)
        BaseConstructor.__init__(self)
        _CoreResolver.__init__(self)


_STANDARD_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
}


if getattr(yaml, "__with_libyaml__", False):
    from yaml.cyaml import CParser  # type: ignore[attr-defined]  # the stubs do not re-export it

    class _FastStrictLoader(_StrictComposer, CParser, BaseConstructor, _CoreResolver):
        """libyaml's scanner and parser (C, linear in flow depth) under the strict composer
        above, which refuses aliases and deep nesting event by event as before."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _StrictComposer.__init__(self)
            BaseConstructor.__init__(self)
            _CoreResolver.__init__(self)

    _LOADER: type = _FastStrictLoader
else:  # PyYAML without libyaml: the pure-Python scanner, bounded in flow depth
    _LOADER = _StrictLoader


def _compose_yaml(text: str) -> Node | None:
    loader = _LOADER(text)
    try:
        return loader.get_single_node()
    except yaml.MarkedYAMLError as error:
        if "maximum nesting depth" in str(error.problem or ""):  # libyaml's own bound (1,000 levels)
            raise _TooDeep() from None
        raise
    finally:
        loader.dispose()


def _scalar(node: ScalarNode) -> Any:
    tag, value = node.tag, node.value
    if tag == "tag:yaml.org,2002:null":
        return None
    if tag == "tag:yaml.org,2002:bool":
        return value.lower() == "true"
    if tag == "tag:yaml.org,2002:int":
        if value.startswith(("0o", "0x")):
            return int(value, 0)
        return int(value)
    if tag == "tag:yaml.org,2002:float":
        special = value.lstrip("+-").lower()
        if special in (".inf", ".nan"):
            return float("nan")  # refused by the caller: JSON has no NaN or infinities
        # exact, as JSON numbers are read (workflows.jsonvalues): a schema's 1000.10 stays 1000.10
        try:
            return Decimal(value.replace("_", ""))
        except InvalidOperation:  # pragma: no cover - the resolver matched a float's syntax
            return float("nan")
    return value


def _at(node: Node) -> tuple[int, int]:
    """The 1-based (line, column) where ``node`` starts."""
    return node.start_mark.line + 1, node.start_mark.column + 1


def _from_yaml(
    root: Node, violations: list[Violation], lines: dict[str, int], scalars: dict[str, tuple[int, int, str]]
) -> Any:
    """Build plain data from a composed node tree, iteratively, recording lines per pointer
    and where each text value starts (line, column, style)."""
    result: dict[str, Any] = {}
    # (node, pointer, container, key) — the value is stored into container[key]
    stack: list[tuple[Node, str, Any, Any]] = [(root, "", result, "root")]
    lines[""] = root.start_mark.line + 1
    while stack:
        node, at, container, key = stack.pop()
        if node.tag not in _STANDARD_TAGS:
            violations.append(Violation(at, "tag", "explicit YAML tags are not allowed", *_at(node)))
            container[key] = None
            continue
        if isinstance(node, ScalarNode):
            value = _scalar(node)
            if isinstance(value, str):
                scalars[at] = (*_at(node), node.style or "")
            if isinstance(value, float) and not math.isfinite(value):
                violations.append(Violation(at, "type", "NaN and infinities are not allowed", *_at(node)))
            elif isinstance(value, Decimal) and jsonvalues.number_problem(value):
                problem = jsonvalues.number_problem(value) or ""
                violations.append(Violation(at, "range", problem, *_at(node)))
            container[key] = value
        elif isinstance(node, SequenceNode):
            items: list[Any] = [None] * len(node.value)
            container[key] = items
            for index, item in enumerate(node.value):
                here = f"{at}/{index}"
                lines[here] = item.start_mark.line + 1
                stack.append((item, here, items, index))
        elif isinstance(node, MappingNode):
            mapping: dict[str, Any] = {}
            container[key] = mapping
            for key_node, value_node in node.value:
                line, column = _at(key_node)
                if not isinstance(key_node, ScalarNode) or key_node.tag not in _STANDARD_TAGS:
                    violations.append(Violation(at, "key", "mapping keys must be plain text", line, column))
                    continue
                name = str(key_node.value)
                here = f"{at}/{escape(name)}"
                if name in mapping:
                    first = lines.get(here)
                    violations.append(
                        Violation(here, "duplicate", f"duplicate key (first on line {first})", line, column)
                    )
                    continue
                mapping[name] = None
                lines[here] = line
                stack.append((value_node, here, mapping, name))
    return result["root"]


# --- JSON ------------------------------------------------------------------------------------


class _DuplicateKey(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey
        out[key] = value
    return out


def _refuse_constant(_name: str) -> Any:
    raise ValueError("non-finite number")


# --- entry point -----------------------------------------------------------------------------


def _yaml_syntax(error: yaml.MarkedYAMLError, text: str) -> Violation:
    """The parser's reason in words, where it noticed it (1-based line and column) and, when
    that is elsewhere, where the construct it was reading began (an unclosed quote)."""
    mark = error.problem_mark or error.context_mark
    if mark is None:
        return Violation("", "syntax", "not valid YAML")
    reason = str(error.problem or "the text is not YAML")
    if text[mark.index : mark.index + 1] == "\t":
        reason = "a tab character; YAML is indented with spaces"
    elif error.context:
        reason = f"{reason} {error.context}"
        start = error.context_mark
        if start is not None and (start.line, start.column) != (mark.line, mark.column):
            reason = f"{reason} that starts on line {start.line + 1}, column {start.column + 1}"
    return Violation("", "syntax", f"not valid YAML: {reason}", mark.line + 1, mark.column + 1)


def _fail(violations: list[Violation]) -> DefinitionError:
    first = violations[0]
    where = safe_pointer(first.pointer) if first.pointer else "the document"
    return DefinitionError(f"definition document is not valid: {where}: {first.message}", violations=violations)


def decode(source: str | bytes, format: str) -> str:
    """The source as text, or :class:`DefinitionError` for a malformed encoding."""
    if isinstance(source, str):
        return source
    if format == "json":
        try:
            encoding = json.detect_encoding(source)
            text = source.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise _fail([Violation("", "encoding", "the document is not valid UTF-8, UTF-16 or UTF-32")]) from None
        return text[1:] if text.startswith("\ufeff") else text
    try:
        return source.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail([Violation("", "encoding", "the document is not valid UTF-8")]) from None


def check_text(text: str) -> list[Violation]:
    match = _SURROGATE_OR_NUL.search(text)
    if match is None:
        return []
    line = text.count("\n", 0, match.start()) + 1
    column = match.start() - text.rfind("\n", 0, match.start())
    kind = "NUL character" if match.group() == "\x00" else "unpaired surrogate"
    return [Violation("", "encoding", f"the document contains a {kind}", line, column)]


def _check_strings(data: Any, lines: Mapping[str, int]) -> list[Violation]:
    found: list[Violation] = []
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str):
            if _SURROGATE_OR_NUL.search(value):
                found.append(Violation(at, "encoding", "text contains a NUL character or an unpaired surrogate"))
        elif isinstance(value, dict):
            for key, item in value.items():
                here = f"{at}/{escape(key)}"
                if _SURROGATE_OR_NUL.search(key):
                    found.append(Violation(at, "encoding", "a key contains a NUL character or an unpaired surrogate"))
                    continue
                stack.append((item, here))
        elif isinstance(value, list):
            stack.extend((item, f"{at}/{index}") for index, item in enumerate(value))
    return [replace(v, line=lines.get(v.pointer)) for v in found]


def parse(source: str | bytes, format: str = "yaml", *, max_bytes: int | None = None) -> Document:
    """Read a document strictly; raises :class:`DefinitionError` listing what is refused.

    ``max_bytes`` defaults to ``MAX_DOCUMENT_SIZE_BYTES``; the limit applies to the source as
    given (bytes) or to its UTF-8 encoding (text), before any parsing.
    """
    if format not in FORMATS:
        raise _fail([Violation("", "format", "format must be yaml or json")])
    limit = max_bytes if max_bytes is not None else conf.get().DEFINITIONS.MAX_DOCUMENT_SIZE_BYTES
    size = len(source) if isinstance(source, bytes) else len(source.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise _fail([Violation("", "maxLength", f"the document is larger than {limit} bytes")])
    text = decode(source, format)
    problems = check_text(text)
    if problems:
        raise _fail(problems)

    violations: list[Violation] = []
    lines: dict[str, int] = {}
    scalars: dict[str, tuple[int, int, str]] = {}
    data: Any = None
    if format == "json":
        try:
            data = json.loads(
                text, object_pairs_hook=_pairs, parse_constant=_refuse_constant, parse_float=jsonvalues.parse_decimal
            )
        except jsonvalues.NumberOutOfRange as error:
            raise _fail([Violation("", "range", str(error))]) from None
        except json.JSONDecodeError as error:
            raise _fail([Violation("", "syntax", f"not valid JSON: {error.msg}", error.lineno, error.colno)]) from None
        except _DuplicateKey:
            raise _fail([Violation("", "duplicate", "duplicate key in a JSON object")]) from None
        except ValueError:
            raise _fail([Violation("", "type", "NaN and infinities are not allowed")]) from None
        except RecursionError:
            raise _fail([Violation("", "depth", "the document is nested too deeply")]) from None
        try:
            node = _compose_yaml(text)
            if node is not None:
                _from_yaml(node, [], lines, scalars)
        except Exception:  # noqa: BLE001 - line numbers are a convenience; JSON already parsed
            lines, scalars = {}, {}
    else:
        try:
            node = _compose_yaml(text)
        except _AliasRefused as refused:
            raise _fail(
                [Violation("", "alias", "YAML aliases are not allowed", refused.line, refused.column)]
            ) from None
        except _TooDeep:
            raise _fail([Violation("", "depth", "the document is nested too deeply")]) from None
        except yaml.MarkedYAMLError as error:
            raise _fail([_yaml_syntax(error, text)]) from None
        except yaml.YAMLError:
            raise _fail([Violation("", "syntax", "not valid YAML")]) from None
        except RecursionError:
            raise _fail([Violation("", "depth", "the document is nested too deeply")]) from None
        if node is None:
            raise _fail([Violation("", "type", "the document is empty")])
        data = _from_yaml(node, violations, lines, scalars)
    if not isinstance(data, dict):
        violations.append(Violation("", "type", "the document must be a mapping", lines.get("")))
    else:
        violations.extend(_check_strings(data, lines))
    if violations:
        raise _fail(violations)
    return Document(data=data, text=text, format=format, digest=text_digest(text), lines=lines, scalars=scalars)
