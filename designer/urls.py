"""The designer, included at ``/designer/`` (namespace ``switchyard_designer``)."""

from django.urls import path

from designer import views

app_name = "switchyard_designer"

urlpatterns = [
    path("", views.workflow_list, name="list"),
    path("new/", views.new, name="new"),
    path("check/", views.check, name="check"),
    path("cel/", views.cel, name="cel"),
    path("step-form/", views.step_form, name="step_form"),
    path("step/", views.step_apply, name="step_apply"),
    path("deploy/", views.deploy, name="deploy"),
    path("<str:scope>/<str:definition_id>/", views.workflow_page, name="workflow"),
    path("<str:scope>/<str:definition_id>/edit/", views.edit, name="edit"),
    path("<str:scope>/<str:definition_id>/compare/", views.compare, name="compare"),
]
