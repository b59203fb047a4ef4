from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from django.views.generic import RedirectView

from accounts.forms import ThrottledAdminAuthenticationForm
from accounts.views import SignedOutView, SignInView, admin_sign_in
from workflows.views.health import healthz

# Both sign-in pages count failed passwords per user name and per address (accounts.throttle).
admin.site.login_form = ThrottledAdminAuthenticationForm
# The reference site's admin is Switchyard's; a host keeps its own admin's name.
admin.site.site_header = admin.site.site_title = _("Switchyard administration")

# Switchyard's error pages; under /api/ they answer problem+json (workflows.views.errors).
handler403 = "workflows.views.errors.forbidden"
handler404 = "workflows.views.errors.not_found"
handler500 = "workflows.views.errors.server_error"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("accounts/login/", SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),  # to LOGOUT_REDIRECT_URL
    path("accounts/signed-out/", SignedOutView.as_view(), name="signed_out"),
    # the site's own icon (static/site/); Switchyard's pages link the app's
    path("favicon.ico", RedirectView.as_view(url=static("site/favicon.svg"), permanent=False)),
    path("admin/login/", admin_sign_in),  # admin.site.login with the 429 of a locked sign-in
    path("admin/", admin.site.urls),
    path("api/", include("workflows.api.urls")),
    path("designer/", include("designer.urls")),
    path("", RedirectView.as_view(url="/tasks/", permanent=False)),
    path("", include("workflows.views.urls")),
    path("", include("workflows.views.ops_urls")),  # /ops/ dashboard and radar, /metrics
]
