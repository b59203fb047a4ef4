from django.apps import AppConfig


class CaptureConfig(AppConfig):
    name = "capture"
    verbose_name = "Record capture"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from capture import triggers

        # pre_save/post_save for every model (cheap filter), post_delete per watched model,
        # connected as the registry is read (see triggers.py)
        triggers.connect()
