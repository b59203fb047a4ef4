"""Django settings for Switchyard, driven by the environment.

Deployment reads: DATABASE_URL, CELERY_BROKER_URL, SECRET_KEY, DEBUG, ALLOWED_HOSTS,
EMAIL_URL (smtp://user:pass@host:port, or console:// / locmem://), LOG_FORMAT (json|text),
WORKFLOWS_EXECUTOR_ENABLED (false makes a recording-only node), METRICS_TOKEN,
WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET, SECURE_COOKIES (and the SECURE_* details),
DATABASE_POOL_MAX_SIZE / DATABASE_POOL_TIMEOUT, DATABASE_TRANSACTION_POOLING (true behind
PgBouncer in transaction pooling mode).
Without DATABASE_URL an embedded PostgreSQL starts (see config/embedded.py); without
CELERY_BROKER_URL a server-less filesystem broker is used.

Safe by default: with DEBUG off there is no fallback SECRET_KEY (start-up stops without one),
the site is taken to be served over HTTPS (secure cookies, HSTS, redirect to https) unless
SECURE_COOKIES=false, and `manage.py check --deploy` reports nothing the project causes.
`python3 dev.py run` and `python3 dev.py test` set what a plain-HTTP local run needs.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import embedded, keys, testing
from workflows import conf as workflows_conf

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


# The test suite's own process: its test client and live server speak plain HTTP, and it has
# secrets of its own (`dev.py test` sets them; this covers a bare `pytest`), which the
# processes it starts (Celery worker and beat) inherit.
TEST_RUN = "pytest" in sys.modules
if TEST_RUN:
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(64))
    os.environ.setdefault("WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET", secrets.token_urlsafe(32))
    # pytest-xdist: each of the suite's worker processes (gw0, gw1, ...) has a database of its
    # own (pytest-django's `_gwN` suffix) and a broker of its own, which the Celery worker and
    # beat it starts inherit through the environment (docs/development.md, "Tests").
    testing.isolate_xdist_broker(os.environ)

DEBUG = env_bool("DEBUG", False)
# No known fallback key: with DEBUG off a missing SECRET_KEY stops start-up. With DEBUG on, the
# key `dev.py run` keeps under the data folder (made on first use, mode 0600).
# Commands that neither serve requests nor sign anything (building or applying the schema,
# collecting static files, help) run with a throwaway random key that is never stored, so
# `manage.py makemigrations --check` or a deploy's `migrate` step needs no secret.
OFFLINE_COMMANDS = frozenset(
    {
        "makemigrations",
        "migrate",
        "showmigrations",
        "sqlmigrate",
        "collectstatic",
        "help",
        "makemessages",
        "compilemessages",
    }
)
SECRET_KEY = os.environ.get("SECRET_KEY", "").strip()
if not SECRET_KEY and Path(sys.argv[0]).name == "manage.py" and sys.argv[1:2] and sys.argv[1] in OFFLINE_COMMANDS:
    SECRET_KEY = secrets.token_urlsafe(64)
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set and DEBUG is off: set SECRET_KEY to a long random value "
            "(python3 dev.py run makes one for a local run)"
        )
    SECRET_KEY = keys.load_or_create(embedded.DATA_DIR / keys.SECRET_KEY_FILE)
ALLOWED_HOSTS = [
    h.strip() for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "accounts",
    "workflows",
    "capture",
    "designer",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # the browser's Accept-Language picks one of LANGUAGES (after sessions, before common)
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "config.middleware.FrameGuardMiddleware",  # CSP frame-ancestors 'none' on every response
    "django_htmx.middleware.HtmxMiddleware",
    "capture.middleware.CaptureActorMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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

# --- database -------------------------------------------------------------------------
_db: dict[str, Any]
if os.environ.get("DATABASE_URL"):
    _db = {**dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=60, conn_health_checks=True)}
    EMBEDDED_DATABASE = False
else:
    _db = embedded.database_settings()
    EMBEDDED_DATABASE = True


def _celery_process() -> bool:
    """`celery -A config worker|beat`, as the `celery` script or `python -m celery`."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return program.name == "celery" or (program.name == "__main__.py" and program.parent.name == "celery")


# Processes that serve HTTP (runserver, gunicorn, ASGI) take connections from a bounded pool
# (psycopg_pool through Django's `pool` option): a burst of requests waits for a connection
# (up to DATABASE_POOL_TIMEOUT seconds) instead of opening one per thread until PostgreSQL
# refuses more. Celery processes run one task at a time per process and keep their one
# persistent connection (conn_max_age; the engine's prepared statements live on it).
DATABASE_POOL_MAX_SIZE = int(os.environ.get("DATABASE_POOL_MAX_SIZE", "10"))
if DATABASE_POOL_MAX_SIZE > 0 and not _celery_process():
    _db["CONN_MAX_AGE"] = 0  # Django's pool requires it: a connection goes back after each request
    _db.setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": float(os.environ.get("DATABASE_POOL_TIMEOUT", "30")),
        "max_idle": 300,
    }
# Behind PgBouncer in transaction pooling mode (DATABASE_TRANSACTION_POOLING=true), a server
# connection belongs to this process only for one transaction: nothing may outlive it. Django
# then opens no server-side cursors (`.iterator()` would hold a cursor across transactions),
# and the engine prepares no statements (it reads this same setting: a prepared statement
# lives on one server connection, which the next transaction may not get). Everything else the
# engine keeps is transaction-scoped already (set_config(..., true), pg_advisory_xact_lock).
if env_bool("DATABASE_TRANSACTION_POOLING", False):
    _db["DISABLE_SERVER_SIDE_CURSORS"] = True
# Processes the test suite starts (a real Celery worker and beat) must use the database
# pytest-django created, whose name only the test process knows.
if os.environ.get("SWITCHYARD_DB_NAME"):
    _db["NAME"] = os.environ["SWITCHYARD_DB_NAME"]
_db.setdefault("OPTIONS", {})
_db["OPTIONS"].setdefault("application_name", os.environ.get("SWITCHYARD_PROCESS", "switchyard"))
_db["TEST"] = {"NAME": os.environ.get("SWITCHYARD_TEST_DB", "test_switchyard")}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- auth, i18n, static ---------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/tasks/"
LOGOUT_REDIRECT_URL = "signed_out"  # accounts.views.SignedOutView, for the admin's sign-out too
LANGUAGE_CODE = "en"
# the languages the apps ship translations for (each app's locale/ folder; the project's own
# templates in config/locale); LocaleMiddleware picks one from the browser's Accept-Language
LANGUAGES = [("en", "English"), ("de", "Deutsch")]
LOCALE_PATHS = [BASE_DIR / "config" / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]  # the reference site's own assets; the apps' stay in the apps
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # request bodies are capped before parsing

# --- security -------------------------------------------------------------------------
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# With DEBUG off the site is taken to be served over HTTPS (what production needs, and what
# `check --deploy` asks for); a plain-HTTP run says SECURE_COOKIES=false (dev.py run does; the
# test process is plain HTTP). Behind a proxy that ends TLS, set
# SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO.
if env_bool("SECURE_COOKIES", not DEBUG and not TEST_RUN):
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load balancers probe it over plain HTTP
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
if os.environ.get("SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = (os.environ["SECURE_PROXY_SSL_HEADER"].strip(), "https")

# --- email ----------------------------------------------------------------------------
_email_url = os.environ.get("EMAIL_URL", "console://")
_email = urlparse(_email_url)
if _email.scheme in ("smtp", "smtps", "submission"):
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST = _email.hostname or "localhost"
    EMAIL_PORT = _email.port or (465 if _email.scheme == "smtps" else 587 if _email.scheme == "submission" else 25)
    EMAIL_HOST_USER = unquote(_email.username or "")
    EMAIL_HOST_PASSWORD = unquote(_email.password or "")
    EMAIL_USE_SSL = _email.scheme == "smtps"
    EMAIL_USE_TLS = _email.scheme == "submission"
elif _email.scheme == "locmem":
    EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "switchyard@localhost")
SITE_URL = os.environ.get("SITE_URL", "http://127.0.0.1:8000")

# --- Celery (transport only: the database is the truth) ---------------------------------
if os.environ.get("CELERY_BROKER_URL"):
    CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
    if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        # every message has a sweep behind it (ids only, "may be lost without harm"): no
        # unacked bookkeeping in Redis, which cost two Redis round trips per message
        CELERY_BROKER_TRANSPORT_OPTIONS["ack_emulation"] = False
    if CELERY_BROKER_URL.startswith("redis://"):
        CELERY_BROKER_TRANSPORT = "workflows.broker:Transport"  # one Redis client per pool, not per publish
    EMBEDDED_BROKER = False
else:
    _broker = embedded.broker_settings()
    CELERY_BROKER_URL = str(_broker["broker_url"])
    CELERY_BROKER_TRANSPORT_OPTIONS = dict(_broker["broker_transport_options"])
    CELERY_BROKER_TRANSPORT = "config.filesystem_broker:Transport"  # messages appear whole
    EMBEDDED_BROKER = True
# Celery's Django fixup closes the database connection around every task unless this is set (a
# new PostgreSQL backend per task); our tasks call close_old_connections() themselves.
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# JSON is Celery's default serializer and the only content it accepts: CELERY_TASK_SERIALIZER and
# CELERY_ACCEPT_CONTENT are left out (under the CELERY namespace Celery reads them as its old
# setting names and warns at every worker start)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "workflows-sweep": {"task": "workflows.sweep", "schedule": float(os.environ.get("SWEEP_INTERVAL_SECONDS", "2"))},
    "capture-sweep": {"task": "capture.sweep", "schedule": float(os.environ.get("SWEEP_INTERVAL_SECONDS", "2"))},
    "capture-retention": {"task": "capture.retention", "schedule": 3600.0},
    "workflows-retention": {"task": "workflows.retention", "schedule": 3600.0},
    "workflows-run-totals": {
        "task": "workflows.run_totals",
        "schedule": float(os.environ.get("RUN_TOTALS_INTERVAL_SECONDS", "60")),
    },
}

# --- REST framework -------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "workflows.api.errors.problem_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": os.environ.get("THROTTLE_ANON", "60/minute"),
        "user": os.environ.get("THROTTLE_USER", "6000/minute"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Switchyard API",
    "DESCRIPTION": "Durable, versioned workflows over your records.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- workflows --------------------------------------------------------------------------
# Every key and default comes from the reference texts; workflows.conf validates them at
# start-up and `manage.py check` reports unknown keys.
# Deployment overrides: WORKFLOWS_<SECTION>_<KEY>, e.g. WORKFLOWS_EXECUTOR_ENABLED=false.
WORKFLOWS: dict[str, dict[str, object]] = workflows_conf.from_environment(os.environ)
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")

# --- logging ----------------------------------------------------------------------------
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text" if DEBUG or EMBEDDED_DATABASE else "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "workflows": {"level": os.environ.get("WORKFLOWS_LOG_LEVEL", "INFO")},
        "pgserver": {"level": "WARNING"},
    },
}
