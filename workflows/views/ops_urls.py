"""Operations pages (staff), included at the site's root (namespace ``switchyard_ops``): ``/ops/``
dashboard, ``/ops/radar/`` and its actions; ``/metrics`` for Prometheus (bearer token, see
``workflows.views.dashboard.metrics``)."""

from django.urls import path

from workflows.views import dashboard, radar

app_name = "switchyard_ops"

urlpatterns = [
    path("ops/", dashboard.dashboard, name="dashboard"),
    path("ops/radar/", radar.radar, name="radar"),
    path("ops/radar/retry/", radar.retry, name="retry"),
    path("ops/radar/bulk/", radar.bulk, name="bulk"),
    path("ops/radar/reconcile/<int:command_id>/", radar.reconcile, name="reconcile"),
    path("metrics", dashboard.metrics, name="metrics"),
]
