"""Remembers the request's user for record captures written during the request."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from capture import actor


class CaptureActorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with actor.acting_as(request.user if getattr(request, "user", None) else None):
            return self.get_response(request)
