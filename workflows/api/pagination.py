"""Pagination: every list answers ``{"next", "previous", "results"}``.

Runs, history and tasks page with DRF's cursor pagination (stable under inserts); the
definition and activation lists, which come from ``workflows.definitions`` as Python lists,
page by an opaque offset cursor with the same parameter names.

``page_size`` is 1 to ``MAX_PAGE_SIZE``; anything else is refused (400, pointer
``/page_size``) rather than clamped or ignored, so a client never reads a shorter page
than it asked for without being told. The order of the runs list (``?ordering=``) is the
cursor's: a keyset cursor can only page in the order it encodes, so ``RunCursor`` reads the
allow-listed ordering itself (``workflows.api.filters`` validates the parameter).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound
from rest_framework.pagination import BasePagination, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from workflows.exceptions import InvalidPayload, Violation

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
PAGE_PARAMETERS = ("cursor", "page_size")  # what every list accepts besides its filters


def page_size(request: Request) -> int:
    """The ``page_size`` asked for (default ``PAGE_SIZE``); out of range or not an integer: 400."""
    raw = request.query_params.get("page_size")
    if raw is None:
        return PAGE_SIZE
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4 and 1 <= int(raw) <= MAX_PAGE_SIZE):
        message = f"must be an integer from 1 to {MAX_PAGE_SIZE}"
        raise InvalidPayload(
            f"page_size {message}", violations=[Violation(pointer="/page_size", type="range", message=message)]
        )
    return int(raw)


class Cursor(CursorPagination):
    """A keyset cursor whose position is checked before the query (subclasses set ``ordering``)."""

    page_size = PAGE_SIZE
    page_size_query_param = "page_size"
    position_kind = "datetime"

    def get_page_size(self, request: Request) -> int:
        return page_size(request)

    def decode_cursor(self, request: Request) -> Any:
        cursor = super().decode_cursor(request)
        # A cursor is opaque but not signed: refuse a position the database cannot compare
        # instead of failing in the query.
        if cursor is not None and cursor.position is not None:
            position = str(cursor.position)
            valid = parse_datetime(position) is not None if self.position_kind == "datetime" else position.isdigit()
            if not valid or len(position) > 64:
                raise NotFound(self.invalid_cursor_message)
        return cursor


class RunCursor(Cursor):
    ordering = ("-created_at", "-id")
    # ?ordering= -> the cursor's order (datetime columns that are never null: the cursor's
    # position is the first column's value; the id breaks ties)
    orderings = {
        "-created_at": ("-created_at", "-id"),
        "created_at": ("created_at", "id"),
        "-updated_at": ("-updated_at", "-id"),
        "updated_at": ("updated_at", "id"),
    }

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        return self.orderings.get(request.query_params.get("ordering", ""), self.ordering)


class TaskCursor(Cursor):
    ordering = ("created_at", "id")


class HistoryCursor(Cursor):
    ordering = ("seq",)
    position_kind = "integer"


class ListCursor(BasePagination):
    """An offset in an opaque cursor, for lists that are small and already in memory."""

    cursor_query_param = "cursor"
    page_size_query_param = "page_size"

    def paginate_list(self, items: list[Any], request: Request) -> list[Any]:
        self.request = request
        self.count = len(items)
        self.size = page_size(request)
        self.offset = self._offset(request.query_params.get(self.cursor_query_param))
        return items[self.offset : self.offset + self.size]

    def _offset(self, raw: str | None) -> int:
        if raw is None:
            return 0
        try:
            text = base64.b64decode(raw.encode("ascii"), validate=True).decode("ascii")
        except (binascii.Error, UnicodeError, ValueError):
            raise NotFound("Invalid cursor") from None
        if not text.startswith("o=") or not text[2:].isdigit() or len(text) > 12:
            raise NotFound("Invalid cursor")
        return int(text[2:])

    def _link(self, offset: int) -> str:
        url = self.request.build_absolute_uri()
        if offset <= 0:
            return remove_query_param(url, self.cursor_query_param)
        token = base64.b64encode(f"o={offset}".encode("ascii")).decode("ascii")
        return replace_query_param(url, self.cursor_query_param, token)

    def get_paginated_response(self, data: Any) -> Response:
        following = self.offset + self.size
        return Response(
            {
                "next": self._link(following) if following < self.count else None,
                "previous": self._link(max(0, self.offset - self.size)) if self.offset > 0 else None,
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["next", "previous", "results"],
            "properties": {
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "previous": {"type": "string", "nullable": True, "format": "uri"},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "The pagination cursor value.",
                "schema": {"type": "string"},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": "Number of results to return per page.",
                "schema": {"type": "integer"},
            },
        ]
