"""Safe defaults for production (issue #25): no silent development SECRET_KEY, a webhook
signing secret of its own, and ``check --deploy`` clean with a production environment.

The story: with DEBUG off and no SECRET_KEY the app started on a key published in its own
source, webhooks were signed with a key derived from it, and ``check --deploy`` with
DEBUG=false and a real key still warned about HSTS, the https redirect and insecure cookies
unless one knew to add SECURE_COOKIES=true.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from workflows import conf

ROOT = Path(__file__).resolve().parents[2]
# Anything of this test run's environment that would decide for the process under test.
DECIDING = (
    "SECRET_KEY",
    "DEBUG",
    "SECURE_COOKIES",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "SWITCHYARD_DATA_DIR",
    "SWITCHYARD_BROKER_FOLDER",
)


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in DECIDING}
    # parsed, never connected to: these commands need no database (and no embedded server)
    base["DATABASE_URL"] = "postgres://settings-test.invalid/none"
    base["DJANGO_SETTINGS_MODULE"] = "config.settings"
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_start_up_stops_without_a_secret_key_when_debug_is_off() -> None:
    result = manage("check", DEBUG="false")

    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set and DEBUG is off" in result.stderr


@pytest.mark.slow
def test_commands_that_serve_nothing_run_without_a_secret_key() -> None:
    # building the schema signs nothing: a throwaway key, never stored, lets it run
    result = manage("makemigrations", "--check", "--dry-run", DEBUG="false")

    assert result.returncode == 0, result.stderr[-2000:]
    assert "No changes detected" in result.stdout
    assert "SECRET_KEY is not set" not in result.stderr


@pytest.mark.slow
def test_check_deploy_with_a_production_environment_reports_nothing() -> None:
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING",
        DEBUG="false", SECRET_KEY=secrets.token_urlsafe(64), ALLOWED_HOSTS="switchyard.example.com",
    )  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


@pytest.mark.slow
def test_with_debug_on_the_key_is_made_once_under_the_data_folder_and_kept(tmp_path: Path) -> None:
    show = "from django.conf import settings; print(settings.SECRET_KEY)"

    first = manage("shell", "-v", "0", "-c", show, DEBUG="true", SWITCHYARD_DATA_DIR=str(tmp_path))
    second = manage("shell", "-v", "0", "-c", show, DEBUG="true", SWITCHYARD_DATA_DIR=str(tmp_path))

    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "secret_key"
    assert first.stdout.strip() == second.stdout.strip() == key_file.read_text().strip()
    assert len(first.stdout.strip()) >= 50 and not first.stdout.startswith("django-insecure")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_webhooks_are_signed_with_their_own_secret_not_with_secret_key() -> None:
    with override_settings(WORKFLOWS={"SECURITY": {"WEBHOOK_SIGNING_SECRET": "receiver-shared-secret"}}):
        conf.reload()
        key = conf.webhook_signing_key()
        with override_settings(SECRET_KEY=secrets.token_urlsafe(64)):
            assert conf.webhook_signing_key() == key  # rotating SECRET_KEY leaves receivers alone
    conf.reload()

    body = b'{"n":1}'
    assert (
        hmac.new(key, body, hashlib.sha256).hexdigest()
        == hmac.new(b"receiver-shared-secret", body, hashlib.sha256).hexdigest()
    )


def test_without_a_signing_secret_webhooks_are_not_sent_unless_debug() -> None:
    with override_settings(WORKFLOWS={"SECURITY": {"WEBHOOK_SIGNING_SECRET": ""}}, DEBUG=False):
        conf.reload()
        with pytest.raises(ImproperlyConfigured, match="WEBHOOK_SIGNING_SECRET"):
            conf.webhook_signing_key()
    with override_settings(WORKFLOWS={"SECURITY": {"WEBHOOK_SIGNING_SECRET": ""}}, DEBUG=True):
        conf.reload()
        assert conf.webhook_signing_key()  # the development fallback, DEBUG only
    conf.reload()


def test_the_signing_secret_is_read_from_the_environment() -> None:
    raw = conf.from_environment({"WORKFLOWS_SECURITY_WEBHOOK_SIGNING_SECRET": "from-env"})

    assert conf.build(raw).SECURITY.WEBHOOK_SIGNING_SECRET == "from-env"
