"""URLs of the API: ``/api/v1/`` (DESIGN.md §5), the OpenAPI schema at ``/api/schema/`` and
Swagger UI at ``/api/docs/`` (assets from drf-spectacular-sidecar, no CDN).

Included once from ``config/urls.py`` under ``api/``. A path under ``api/`` that matches no
endpoint answers a problem+json 404 rather than Django's HTML page.
"""

from __future__ import annotations

from typing import Any

from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from workflows.api import views

app_name = "switchyard_api"

v1: list[URLPattern | URLResolver] = [
    path("runs/", views.RunsView.as_view(), name="runs"),
    path("runs/by-key/signals/", views.SignalByKeyView.as_view(), name="runs-signal-by-key"),
    path("runs/by-key/signal-with-start/", views.SignalWithStartView.as_view(), name="runs-signal-with-start"),
    path("runs/<str:id>/", views.RunView.as_view(), name="run"),
    path("runs/<str:id>/history/", views.RunHistoryView.as_view(), name="run-history"),
    path("runs/<str:id>/signals/", views.RunSignalView.as_view(), name="run-signals"),
    path("runs/<str:id>/cancel/", views.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<str:id>/retry/", views.RunRetryView.as_view(), name="run-retry"),
    path("runs/<str:id>/migrate/", views.RunMigrateView.as_view(), name="run-migrate"),
    path("tasks/", views.TasksView.as_view(), name="tasks"),
    path("tasks/all/", views.AllTasksView.as_view(), name="tasks-all"),
    path("tasks/<str:id>/", views.TaskView.as_view(), name="task"),
    path("tasks/<str:id>/complete/", views.TaskCompleteView.as_view(), name="task-complete"),
    path("tasks/<str:id>/reassign/", views.TaskReassignView.as_view(), name="task-reassign"),
    path("definitions/", views.DefinitionsView.as_view(), name="definitions"),
    path(
        "definitions/<str:scope>/<str:definition_id>/<int:version>/publish/",
        views.DefinitionPublishView.as_view(),
        name="definition-publish",
    ),
    path(
        "definitions/<str:scope>/<str:definition_id>/<int:version>/deprecate/",
        views.DefinitionDeprecateView.as_view(),
        name="definition-deprecate",
    ),
    path(
        "definitions/<str:scope>/<str:definition_id>/<int:version>/retire/",
        views.DefinitionRetireView.as_view(),
        name="definition-retire",
    ),
    path(
        "definitions/<str:scope>/<str:definition_id>/<int:version>/reinstate/",
        views.DefinitionReinstateView.as_view(),
        name="definition-reinstate",
    ),
    path("activations/", views.ActivationsView.as_view(), name="activations"),
    path("activations/<str:scope>/<str:definition_id>/", views.ActivationView.as_view(), name="activation"),
    path("captures/", include("capture.api")),
    path("migrations/", include("workflows.api.migrations")),
    path("bulk-operations/", include("workflows.api.bulk")),
    path("webhooks/", include("workflows.api.webhooks")),
    re_path(r"^[\s\S]*$", views.not_found),  # [\s\S]: a path may hold a (decoded) newline
]

# The contract's own schema settings, whatever the host's SPECTACULAR_SETTINGS say: request
# and response components are split (``StartRunInputRequest``), so a request component states
# what a request must be (``minLength: 1`` where blanks are refused, required members) and a
# response component what an answer holds. Generated clients and schemathesis read this.
SCHEMA_SETTINGS = {
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "workflows.api.base.postprocess"],
}


class SchemaView(SpectacularAPIView):
    """The schema endpoint, never an operation of the schema it serves, whatever the host's
    ``SPECTACULAR_SETTINGS["SERVE_INCLUDE_SCHEMA"]`` says: included (drf-spectacular's
    default), it brought the host's default authentication classes into the schema next to the
    API's own, and ``check --deploy`` warned 38 times about two ``tokenAuth`` components."""

    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)


class SwaggerView(SpectacularSwaggerView):
    """Swagger UI from drf-spectacular-sidecar's static files whatever the host's
    ``SPECTACULAR_SETTINGS`` say (their default is a CDN): no page of Switchyard loads anything
    from another site."""

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(f"drf_spectacular_sidecar/swagger-ui-dist/{filename}")

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static("drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png")


urlpatterns = [
    path("v1/", include(v1)),
    path("schema/", SchemaView.as_view(custom_settings=SCHEMA_SETTINGS), name="schema"),
    path("docs/", SwaggerView.as_view(url_name="switchyard_api:schema"), name="docs"),
    re_path(r"^[\s\S]*$", views.not_found),  # any other path under /api/ (v2/, a typo)
]
