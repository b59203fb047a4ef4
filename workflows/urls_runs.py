"""The run viewer's pages, included at ``/runs/`` (namespace ``workflows:runs``)."""

from django.urls import path

from workflows.views import runs

app_name = "runs"

urlpatterns = [
    path("", runs.run_list, name="list"),
    path("<uuid:run_id>/", runs.run_detail, name="detail"),
    path("<uuid:run_id>/history/", runs.run_history, name="history"),
    path("<uuid:run_id>/history/<int:seq>/change/", runs.decision_change, name="change"),
    path("<uuid:run_id>/cancel/", runs.run_cancel, name="cancel"),
]
