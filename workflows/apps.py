from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkflowsConfig(AppConfig):
    name = "workflows"
    verbose_name = _("Workflows")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from workflows import checks, conf  # noqa: F401  (registers the system checks)

        conf.reload()  # fails start-up with ImproperlyConfigured naming the bad key
        from workflows import tasks

        tasks.install()  # after-commit wake-ups go out as Celery messages
        __import__("workflows.metrics").metrics.install()  # executor observers feed the Prometheus counters
        import importlib
        import os

        # extra callback modules (beyond each app's workflow_callbacks.py), e.g. for tests
        for module in filter(None, os.environ.get("SWITCHYARD_CALLBACK_MODULES", "").split(",")):
            importlib.import_module(module.strip())
