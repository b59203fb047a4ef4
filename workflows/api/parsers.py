"""Request body parsers that bound the body before any parser sees it.

- The body is read up to ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (a larger Content-Length is refused
  without reading): 413 PAYLOAD_TOO_LARGE. DRF's own JSONParser reads the stream unbounded.
- JSON is pre-scanned for nesting depth with the engine's iterative scan, so a 20,000-deep
  body is a 400 INVALID_PAYLOAD and never reaches the recursive ``json`` decoder.
- Numbers with a fraction or an exponent are read as ``Decimal`` (``workflows.jsonvalues``),
  so ``1000.10`` reaches the engine and storage digit for digit; integers stay ``int``.
- NaN/Infinity, numbers beyond 1e308 in magnitude (1e400: a 400 INVALID_PAYLOAD with a
  value-free violation), invalid UTF-8, NUL characters and unpaired surrogates are refused: PostgreSQL
  stores none of them, and they would otherwise surface as database errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from workflows import jsonvalues
from workflows.api.errors import PayloadTooLarge, escape_pointer_token
from workflows.engine.bounds import MAX_DEPTH, prescan_text
from workflows.exceptions import InvalidPayload, Violation

FALLBACK_LIMIT = 2_621_440
# A recording body wraps its payload in one object ({"payload": ...}): the payload itself may
# be 64 deep, so the body may be one deeper. The engine checks the payload's own depth.
BODY_MAX_DEPTH = MAX_DEPTH + 1


def body_limit() -> int:
    limit = getattr(settings, "DATA_UPLOAD_MAX_MEMORY_SIZE", None)
    return int(limit) if limit else FALLBACK_LIMIT


def read_bounded(stream: Any, parser_context: Mapping[str, Any] | None) -> bytes:
    limit = body_limit()
    request = (parser_context or {}).get("request")
    declared = request.META.get("CONTENT_LENGTH") if request is not None else None
    try:
        if declared and int(declared) > limit:
            raise PayloadTooLarge()
    except ValueError:
        pass
    if stream is None:
        return b""
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        raise PayloadTooLarge()
    return bytes(raw)


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidPayload(
            "the request body is not UTF-8",
            violations=[Violation(pointer="", type="encoding", message="not UTF-8")],
        ) from None


def bad_text(value: str) -> bool:
    """Text no column can hold: a NUL character or an unpaired surrogate."""
    if "\x00" in value:
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate
        return True
    return False


def check_text(data: Any) -> None:
    """Refuse NUL characters and unpaired surrogates anywhere in a parsed body (iteratively).

    The pointer names the top-level member only: deeper keys are submitted data.
    """
    members = list(data.items()) if isinstance(data, dict) else [(None, data)]
    for name, member in members:
        pointer = "" if name is None or bad_text(name) else f"/{escape_pointer_token(name)}"
        stack: list[Any] = [member] if name is None or pointer else []
        bad = not stack
        while stack and not bad:
            value = stack.pop()
            if isinstance(value, str):
                bad = bad_text(value)
            elif isinstance(value, dict):
                bad = any(bad_text(key) for key in value)
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
        if bad:
            raise InvalidPayload(
                "text must not contain NUL characters or unpaired surrogates",
                violations=[
                    Violation(
                        pointer=pointer, type="encoding", message="contains a NUL character or an unpaired surrogate"
                    )
                ],
            )


class BoundedJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = read_bounded(stream, parser_context)
        if not raw.strip():
            return {}
        prescan_text(raw, max_depth=BODY_MAX_DEPTH)
        text = _decode(raw)
        try:
            # decimals as Decimal (exact: 1000.10 stays 1000.10), integers as int
            data = jsonvalues.loads_input(text)
        except jsonvalues.NumberOutOfRange as error:
            raise InvalidPayload(
                "the request body holds a number that cannot be stored",
                violations=[Violation(pointer="", type="number", message=str(error))],
            ) from None
        except (ValueError, RecursionError):
            raise ParseError("not valid JSON") from None
        check_text(data)
        return data


class YAMLDocumentParser(BaseParser):
    """A definition document sent as the raw body: ``{"text": <body>, "format": "yaml"}``."""

    media_type = "application/yaml"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        text = _decode(read_bounded(stream, parser_context))
        check_text(text)
        return {"text": text, "format": "yaml"}


class XYAMLDocumentParser(YAMLDocumentParser):
    media_type = "application/x-yaml"


class TextYAMLDocumentParser(YAMLDocumentParser):
    media_type = "text/yaml"
