import os

from django.core.servers import basehttp
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# `manage.py runserver` (what `dev.py run` starts) loads this module before it listens. Its
# server's listen backlog is 10: more clients than that connecting at once were reset before
# Django saw them. Let a burst queue (the database pool bounds the work behind it).
basehttp.WSGIServer.request_queue_size = 128
