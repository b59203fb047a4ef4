"""Security headers every response carries.

``FrameGuardMiddleware`` refuses framing on every response: ``Content-Security-Policy:
frame-ancestors 'none'`` (added to a policy a view set, never replacing it) and
``X-Frame-Options: DENY`` (set here as well as by Django's clickjacking middleware, so a view
exempted from that one is still not frameable). Switchyard has no page that is meant to be
embedded.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

FRAME_ANCESTORS = "frame-ancestors 'none'"


class FrameGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = response.get("Content-Security-Policy", "")
        if "frame-ancestors" not in policy:
            response["Content-Security-Policy"] = f"{policy}; {FRAME_ANCESTORS}" if policy else FRAME_ANCESTORS
        response["X-Frame-Options"] = "DENY"
        return response
