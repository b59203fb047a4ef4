from django.apps import AppConfig


class CaptureConfig(AppConfig):
    name = "capture"
    verbose_name = "Record capture"
    default_auto_field = "django.db.models.BigAutoField"
