"""Sign-in forms with the throttle (``accounts.throttle``) in front of authentication."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.utils.translation import gettext_lazy as _

from accounts import throttle

# Value-free: it names neither the user nor the address, and says the same for both.
LOCKED_MESSAGE = _("Too many failed sign-in attempts. Sign-in is locked for a while; try again later.")


class ThrottledSignInMixin:
    """Refuses a locked user name or address before checking the password; counts a failed
    password (the attempt that reaches the limit already answers with the lock message)."""

    request: Any
    cleaned_data: dict[str, Any]
    user_cache: Any
    throttled = False

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if not username or not password:
            return super().clean()  # type: ignore[misc,no-any-return]
        if throttle.is_locked(username, self.request):
            self._refuse()
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            if self.user_cache is None and throttle.record_failure(username, self.request):
                self._refuse()
            raise
        throttle.record_success(username)
        return cleaned

    def _refuse(self) -> None:
        self.throttled = True
        raise forms.ValidationError(LOCKED_MESSAGE, code="throttled")


class ThrottledAuthenticationForm(ThrottledSignInMixin, AuthenticationForm):
    """The approvers' sign-in page (``/accounts/login/``)."""


class ThrottledAdminAuthenticationForm(ThrottledSignInMixin, AdminAuthenticationForm):
    """The admin's sign-in page (``/admin/login/``)."""
