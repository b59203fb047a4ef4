"""The Migrate dialog and migration records, included at ``/migrate/`` (namespace
``workflows:migrate``)."""

from django.urls import path

from workflows.views import migrate

app_name = "migrate"

urlpatterns = [
    path("records/<int:record_id>/", migrate.record, name="record"),
    path("records/<int:record_id>/apply/", migrate.apply, name="apply"),
    path("records/<int:record_id>/progress/", migrate.progress, name="progress"),
    path("records/<int:record_id>/discard/", migrate.discard, name="discard"),
    path("<str:scope>/<str:definition_id>/", migrate.dialog, name="dialog"),
    path("<str:scope>/<str:definition_id>/picker/<int:i>/", migrate.picker, name="picker"),
    path("<str:scope>/<str:definition_id>/preview/", migrate.preview, name="preview"),
    path("<str:scope>/<str:definition_id>/records/", migrate.records, name="records"),
]
