from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CaptureConfig(AppConfig):
    name = "capture"
    verbose_name = _("Record capture")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from capture import triggers

        # pre_save/post_save for every model (cheap filter), post_delete per watched model,
        # connected as the registry is read (see triggers.py)
        triggers.connect()
