"""Acme Finance in production: what ``manage.py check --deploy`` asks of any Django site.
Switchyard itself adds nothing to this list (tests/test_host_project.py checks that)."""

import os

from acme.settings import *  # noqa: F403

DEBUG = False
SECRET_KEY = os.environ["ACME_SECRET_KEY"]
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = 31536000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
