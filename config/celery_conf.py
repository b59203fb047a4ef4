"""The ``CELERY_*`` settings of Django's settings, copied once into a plain dict.

Celery reads its configuration on every publish (routes, serializer, compression, ...:
seven look-ups, each trying several spellings of the key). Read through Django's lazy
settings object that cost about a fifth of a wake-up's publish; from a dict it costs
almost nothing. Imported by Celery on first use (``config.celery``), after Django's settings
are loaded; a ``CELERY_*`` setting changed at run time (``override_settings``) does not reach
Celery, as with any configuration Celery has already read.
"""

from django.conf import settings

CONF = {name: getattr(settings, name) for name in dir(settings) if name.startswith("CELERY_")}
