"""Acme Finance's URLs: its own pages, and Switchyard under /approvals/ (docs/install.md, step 3)."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="workflows:inbox"), name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("approvals/", include("workflows.views.urls")),
    path("approvals/", include("workflows.views.ops_urls")),
    path("approvals/designer/", include("designer.urls")),
    path("approvals/api/", include("workflows.api.urls")),
]
