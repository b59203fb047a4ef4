from django.apps import AppConfig


class DesignerConfig(AppConfig):
    name = "designer"
    verbose_name = "Designer"
    default_auto_field = "django.db.models.BigAutoField"
