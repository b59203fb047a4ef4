"""Switchyard's 403, 404 and 500 pages, for a site's ``handler403``/``handler404``/``handler500``.

Django's own pages are bare ("403 Forbidden") and, worse, look like a broken site to an
approver who followed a stale link. These say what happened and offer a way back, in the
site's layout. A refusal names the capability and the permission that grants it
(``access.refusal``: value-free), never the object refused.

Under the API's mount (``/api/`` on the reference site) the answers stay problem+json, the
shape of every other API error (``workflows.api.errors``). The 500 page is a static template:
it renders with no database, no request context and no URL resolution.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.template import loader
from django.urls import NoReverseMatch, reverse

from workflows.api.errors import PROBLEM_CONTENT_TYPE, problem


def _api_prefix() -> str | None:
    try:
        return reverse("switchyard_api:schema").removesuffix("schema/")
    except NoReverseMatch:
        return None


def _is_api(request: HttpRequest) -> bool:
    prefix = _api_prefix()
    return prefix is not None and request.path.startswith(prefix)


def _problem(status: int, code: str, title: str, detail: str) -> JsonResponse:
    body = problem(status, code, title, detail).data
    return JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """What the user lacks (the refusal's text when it is a ``PermissionDenied`` with one)."""
    reason = str(exception) if isinstance(exception, PermissionDenied) and exception.args else ""
    if _is_api(request):
        return _problem(
            403, "PERMISSION_DENIED", "Permission denied", reason or "you do not have permission to do this"
        )
    body = loader.render_to_string("switchyard/403.html", {"reason": reason}, request)
    return HttpResponse(body, status=403)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """A page that does not exist (the exception's text is never shown: it may quote the path)."""
    if _is_api(request):
        return _problem(404, "NOT_FOUND", "Not found", "no such resource")
    body = loader.render_to_string("switchyard/404.html", {}, request)
    return HttpResponse(body, status=404)


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """The static 500 page, or a problem for the API (rendered without a request context)."""
    try:
        api = _is_api(request)
    except Exception:  # noqa: BLE001 - a broken URL conf must not break the 500 page itself
        api = False
    if api:
        return _problem(500, "INTERNAL", "Internal error", "the server failed to answer this request")
    return HttpResponseServerError(loader.get_template("switchyard/500.html").render())
