"""Acme Finance's settings, with Switchyard added as docs/install.md says (step 2).

The database and the broker come from the environment the test gives (ACME_DB_*,
ACME_BROKER_URL and, for the filesystem transport, ACME_BROKER_FOLDER).
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("ACME_SECRET_KEY", "acme-development-only-key-not-for-production")
DEBUG = os.environ.get("ACME_DEBUG", "true") == "true"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Switchyard and what its pages and API use
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "workflows",
    "capture",
    "designer",
    # the host's own apps
    "people",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "capture.middleware.CaptureActorMiddleware",  # who saved a record, for the runs it starts
]

ROOT_URLCONF = "acme.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # the host's folder comes first: its switchyard/base.html wraps Switchyard's pages
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("ACME_DB_NAME", "acme"),
        "HOST": os.environ.get("ACME_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("ACME_DB_PORT", "5432"),
        "USER": os.environ.get("ACME_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("ACME_DB_PASSWORD", ""),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "people.User"  # signs in by e-mail
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "workflows:inbox"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# --- Celery: the host's broker; Switchyard's periodic sweeps on its beat ------------------
CELERY_BROKER_URL = os.environ.get("ACME_BROKER_URL", "redis://127.0.0.1:6379/0")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _folder = os.environ["ACME_BROKER_FOLDER"]
    CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": _folder, "data_folder_out": _folder}
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("ACME_QUEUE", "acme")
# no global task option: Switchyard's tasks carry their own (docs/install.md, step 4)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# JSON is Celery's default serializer and the only content it accepts: CELERY_TASK_SERIALIZER and
# CELERY_ACCEPT_CONTENT are left out (under the CELERY namespace Celery reads them as its old
# setting names and warns at every worker start)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "workflows-sweep": {"task": "workflows.sweep", "schedule": 2.0},
    "capture-sweep": {"task": "capture.sweep", "schedule": 2.0},
    "capture-retention": {"task": "capture.retention", "schedule": 3600.0},
    "workflows-retention": {"task": "workflows.retention", "schedule": 3600.0},
}

# --- Switchyard's API (optional: only when the host mounts workflows.api.urls) ------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "workflows.api.errors.problem_exception_handler",
}
SPECTACULAR_SETTINGS = {"SWAGGER_UI_DIST": "SIDECAR", "SWAGGER_UI_FAVICON_HREF": "SIDECAR", "REDOC_DIST": "SIDECAR"}

# task notices link to the task page at SITE_URL; the console shows them
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = "approvals@acme.test"
SITE_URL = os.environ.get("ACME_SITE_URL", "http://127.0.0.1:8000")

# --- Switchyard: every key has a default (docs/operations.md lists them) ------------------
WORKFLOWS = {
    "SECURITY": {"WEBHOOK_SIGNING_SECRET": os.environ.get("ACME_WEBHOOK_SIGNING_SECRET", "")},
}
