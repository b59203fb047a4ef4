"""The approvers' pages: ``/tasks/`` (inbox) and ``/tasks/<id>/`` (a task and its decisions)."""

from django.urls import include, path

from workflows.views import tasks

app_name = "workflows"

urlpatterns = [
    path("tasks/", tasks.inbox, name="inbox"),
    path("tasks/<uuid:task_id>/", tasks.task_page, name="task"),
    path("runs/", include("workflows.urls_runs")),
    path("migrate/", include("workflows.urls_migrate")),
]
