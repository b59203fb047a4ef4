from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from workflows.views.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("workflows.api.urls")),
    path("designer/", include("designer.urls")),
    path("", RedirectView.as_view(url="/tasks/", permanent=False)),
    path("", include("workflows.urls")),
    path("", include("workflows.urls_ops")),  # /ops/ dashboard and radar, /metrics
]
