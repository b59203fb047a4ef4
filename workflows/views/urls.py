"""The pages' URLs (namespace ``workflows``), included at the site's root: the approvers'
``/tasks/`` (inbox) and ``/tasks/<id>/`` (a task and its decisions); the run viewer under
``/runs/`` (namespace ``workflows:runs``); the Migrate dialog and migration records under
``/migrate/`` (namespace ``workflows:migrate``); the requesters' ``/requests/`` (My requests),
``/requests/new/`` (New request) and their run pages (namespace ``workflows:requests``). The
staff pages have their own namespace (``workflows.views.ops_urls``).
"""

from django.urls import include, path

from workflows.views import migrate, requests, runs, tasks

app_name = "workflows"

_runs = [
    path("", runs.run_list, name="list"),
    path("<uuid:run_id>/", runs.run_detail, name="detail"),
    path("<uuid:run_id>/history/", runs.run_history, name="history"),
    path("<uuid:run_id>/history/<int:seq>/change/", runs.decision_change, name="change"),
    path("<uuid:run_id>/cancel/", runs.run_cancel, name="cancel"),
    path("<uuid:run_id>/signal/", runs.run_signal, name="signal"),
    path("<uuid:run_id>/retry/", runs.run_retry, name="retry"),
]

_requests = [
    path("", requests.my_requests, name="mine"),
    path("new/", requests.new_request, name="new"),
    path("new/<str:definition_id>/", requests.start_form, name="start"),
    path("<uuid:run_id>/", requests.request_detail, name="detail"),
]

_migrate = [
    path("records/<int:record_id>/", migrate.record, name="record"),
    path("records/<int:record_id>/apply/", migrate.apply, name="apply"),
    path("records/<int:record_id>/progress/", migrate.progress, name="progress"),
    path("records/<int:record_id>/discard/", migrate.discard, name="discard"),
    path("records/<int:record_id>/pause/", migrate.pause, name="pause"),
    path("records/<int:record_id>/resume/", migrate.resume, name="resume"),
    path("records/<int:record_id>/close/", migrate.close, name="close"),
    path("<str:scope>/<str:definition_id>/", migrate.dialog, name="dialog"),
    path("<str:scope>/<str:definition_id>/picker/<int:i>/", migrate.picker, name="picker"),
    path("<str:scope>/<str:definition_id>/target-graph/", migrate.target_graph, name="target-graph"),
    path("<str:scope>/<str:definition_id>/preview/", migrate.preview, name="preview"),
    path("<str:scope>/<str:definition_id>/records/", migrate.records, name="records"),
]

urlpatterns = [
    path("tasks/", tasks.inbox, name="inbox"),
    path("tasks/<uuid:task_id>/", tasks.task_page, name="task"),
    path("tasks/<uuid:task_id>/claim/", tasks.claim, name="task-claim"),
    path("tasks/completed/", tasks.completed, name="completed"),
    path("runs/", include((_runs, "runs"))),
    path("migrate/", include((_migrate, "migrate"))),
    path("requests/", include((_requests, "requests"))),
]
