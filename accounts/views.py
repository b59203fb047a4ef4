"""Sign-in pages: the approvers' and the admin's, both behind the sign-in throttle; and the
signed-out page that signing out lands on (``LOGOUT_REDIRECT_URL``, also the admin's).

A locked sign-in answers 429 with the form and the lock message (nothing else changes)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.views.generic import TemplateView

from accounts.forms import ThrottledAuthenticationForm

TOO_MANY_REQUESTS = 429


class SignInView(LoginView):
    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "throttled", False):
            response.status_code = TOO_MANY_REQUESTS
        return response


def admin_sign_in(request: HttpRequest) -> HttpResponse:
    """``admin.site.login`` (whose form is the throttled one, see config/urls.py), answering
    429 when the throttle refused."""
    response = admin.site.login(request)
    form = (getattr(response, "context_data", None) or {}).get("form")
    if getattr(form, "throttled", False):
        response.status_code = TOO_MANY_REQUESTS
    return response


class SignedOutView(TemplateView):
    """Says the user signed out and links the approvers' sign-in (``login``), which lets in
    anyone active; the admin's own "Log in again" refuses everyone who is not staff."""

    template_name = "accounts/signed_out.html"
