from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from workflows import checks, conf  # noqa: F401  (registers the system checks)

        conf.reload()  # fails start-up with ImproperlyConfigured naming the bad key
