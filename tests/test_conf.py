"""The WORKFLOWS setting (workflows.conf): defaults, minimums and unknown keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from workflows import conf

ROOT = Path(__file__).resolve().parents[1]


def test_empty_setting_gives_the_reference_defaults() -> None:
    settings = conf.build({})

    assert settings.RECORDING.MAX_PAYLOAD_BYTES == 262144
    assert settings.RECORDING.LOCK_TIMEOUT_MS == 5000
    assert settings.RECORDING.MAX_OPEN_SIGNALS_PER_INSTANCE == 100
    assert settings.RECORDING.SCHEMA_CACHE_MAX_ENTRIES == 256
    assert settings.EXECUTOR.ENABLED is True
    assert settings.EXECUTOR.LEASE_SECONDS == 30
    assert settings.EXECUTOR.MAX_ATTEMPTS == 5
    assert settings.EXECUTOR.MAX_STEPS_PER_SEGMENT == 1000
    assert settings.EXECUTOR.TRANSIENT_BACKOFF_BASE_MS == 200
    assert settings.EXECUTOR.TRANSIENT_BACKOFF_MAX_MS == 30000
    assert settings.EXECUTOR.STUCK_AFTER_SECONDS == 300
    assert settings.DEFINITIONS.MAX_DOCUMENT_SIZE_BYTES == 262144
    assert settings.DEFINITIONS.CACHE_MAX_ENTRIES == 500
    assert settings.DEFINITIONS.CACHE_TTL_SECONDS == 0
    assert settings.DEFINITIONS.PUBLICATION_CLAIM_TIMEOUT_SECONDS == 300
    assert settings.CAPTURE.LEASE_SECONDS == 300
    assert settings.CAPTURE.RETAIN_DAYS == 7
    assert settings.MIGRATE.APPLY_BATCH == 200


def test_retention_keeps_everything_by_default_and_takes_none_or_days() -> None:
    settings = conf.build({})
    assert settings.RETENTION.ENDED_RUNS_DAYS is None
    assert settings.RETENTION.FAILED_RUNS_DAYS is None
    assert settings.RETENTION.ARCHIVE_DIR == ""
    assert settings.RETENTION.BATCH_SIZE == 500
    assert settings.RETENTION.IDEMPOTENCY_KEYS_DAYS == 7
    assert conf.build({"RETENTION": {"ENDED_RUNS_DAYS": 90}}).RETENTION.ENDED_RUNS_DAYS == 90
    assert conf.build({"RETENTION": {"ENDED_RUNS_DAYS": None}}).RETENTION.ENDED_RUNS_DAYS is None
    with pytest.raises(ImproperlyConfigured, match=r"'RETENTION'\]\['ENDED_RUNS_DAYS'\] must be at least 1"):
        conf.build({"RETENTION": {"ENDED_RUNS_DAYS": 0}})
    with pytest.raises(ImproperlyConfigured, match=r"'RETENTION'\]\['BATCH_SIZE'\] must be an integer"):
        conf.build({"RETENTION": {"BATCH_SIZE": None}})  # only a key whose default is None may be None
    environ = {"WORKFLOWS_RETENTION_ENDED_RUNS_DAYS": "30", "WORKFLOWS_RETENTION_FAILED_RUNS_DAYS": "none"}
    assert conf.from_environment(environ)["RETENTION"] == {"ENDED_RUNS_DAYS": 30, "FAILED_RUNS_DAYS": None}


def test_the_radar_settings_are_a_section_of_workflows() -> None:
    radar = conf.build({}).RADAR
    assert (radar.PERCENTILE, radar.WINDOW_DAYS, radar.SAMPLE, radar.FLOOR_SECONDS, radar.ROWS) == (
        0.95,
        30,
        1000,
        3600,
        100,
    )
    assert radar.THRESHOLDS == {}
    given = conf.build({"RADAR": {"PERCENTILE": 0.9, "THRESHOLDS": {"onboarding": 604800, "po:manager": 1.5}}}).RADAR
    assert given.PERCENTILE == 0.9 and given.THRESHOLDS == {"onboarding": 604800, "po:manager": 1.5}
    assert given.ROWS == 100

    assert conf.problems({"RADAR": {"PERCENTILE": 95}}) == [
        "WORKFLOWS['RADAR']['PERCENTILE'] must be a number above 0 and at most 1"
    ]
    assert conf.problems({"RADAR": {"PERCENTILE": "0.95"}}) == [
        "WORKFLOWS['RADAR']['PERCENTILE'] must be a number above 0 and at most 1"
    ]
    assert conf.problems({"RADAR": {"ROWS": 0}}) == ["WORKFLOWS['RADAR']['ROWS'] must be at least 1"]
    (bad_value,) = conf.problems({"RADAR": {"THRESHOLDS": {"onboarding": -1}}})
    (bad_key,) = conf.problems({"RADAR": {"THRESHOLDS": {" ": 60}}})
    (not_a_dict,) = conf.problems({"RADAR": {"THRESHOLDS": [60]}})
    assert "'THRESHOLDS'] holds a value that is not a number of seconds" in bad_value and "-1" not in bad_value
    assert "'THRESHOLDS'] holds a key that is not" in bad_key
    assert "'THRESHOLDS'] must be a dict" in not_a_dict

    environ = {"WORKFLOWS_RADAR_PERCENTILE": "0.99", "WORKFLOWS_RADAR_THRESHOLDS": '{"onboarding": 604800}'}
    assert conf.from_environment(environ)["RADAR"] == {"PERCENTILE": 0.99, "THRESHOLDS": {"onboarding": 604800}}
    assert conf.problems({"RADAR": conf.from_environment({"WORKFLOWS_RADAR_THRESHOLDS": "{oops"})["RADAR"]}) == [
        "WORKFLOWS['RADAR']['THRESHOLDS'] must be a dict of positions to seconds"
    ]


def test_the_old_ops_radar_setting_is_named_by_a_warning() -> None:
    from workflows.checks import check_workflows_setting

    assert [m.id for m in check_workflows_setting(None)] == []
    with override_settings(OPS_RADAR={"ROWS": 5}):
        (warning,) = check_workflows_setting(None)
    assert warning.id == "workflows.W010" and "WORKFLOWS['RADAR']" in warning.msg


def test_the_bounds_of_issue_40_have_defaults_environment_variables_and_checks() -> None:
    settings = conf.build({})
    assert settings.OUTBOUND.QUEUE == "switchyard.outbound"
    assert settings.OUTBOUND.ATTEMPT_SECONDS == 10
    assert settings.EXECUTOR.MAX_RENDERED_CHARS == 65536
    env = conf.from_environment(
        {
            "WORKFLOWS_OUTBOUND_QUEUE": "deliveries",
            "WORKFLOWS_OUTBOUND_ATTEMPT_SECONDS": "4",
            "WORKFLOWS_EXECUTOR_MAX_RENDERED_CHARS": "4096",
        }
    )
    assert env["OUTBOUND"] == {"QUEUE": "deliveries", "ATTEMPT_SECONDS": 4}
    assert env["EXECUTOR"] == {"MAX_RENDERED_CHARS": 4096}
    assert conf.problems(
        {"OUTBOUND": {"QUEUE": " ", "ATTEMPT_SECONDS": 0}, "EXECUTOR": {"MAX_RENDERED_CHARS": 10}}
    ) == [
        "WORKFLOWS['OUTBOUND']['QUEUE'] must name a queue",
        "WORKFLOWS['OUTBOUND']['ATTEMPT_SECONDS'] must be at least 1",
        "WORKFLOWS['EXECUTOR']['MAX_RENDERED_CHARS'] must be at least 256",
    ]


def test_a_given_value_replaces_only_its_default() -> None:
    settings = conf.build({"EXECUTOR": {"LEASE_SECONDS": 60}})

    assert settings.EXECUTOR.LEASE_SECONDS == 60
    assert settings.EXECUTOR.MAX_ATTEMPTS == 5


def test_payload_bound_below_1024_bytes_fails_naming_the_key() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"'RECORDING'\]\['MAX_PAYLOAD_BYTES'\] must be at least 1024"):
        conf.build({"RECORDING": {"MAX_PAYLOAD_BYTES": 512}})


def test_capture_lease_below_3_seconds_fails_naming_the_key() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"'CAPTURE'\]\['LEASE_SECONDS'\] must be at least 3"):
        conf.build({"CAPTURE": {"LEASE_SECONDS": 2}})


def test_unknown_key_fails_naming_it() -> None:
    assert conf.problems({"EXECUTOR": {"LEASE_SECOND": 30}}) == [
        "WORKFLOWS['EXECUTOR']['LEASE_SECOND'] is not a known key"
    ]


def test_unknown_section_fails_naming_it() -> None:
    (problem,) = conf.problems({"EXECUTORS": {}})
    assert problem.startswith("WORKFLOWS['EXECUTORS'] is not a known section")


@pytest.mark.parametrize("value", ["30", 2.5, True, None])
def test_a_value_of_the_wrong_type_fails(value: object) -> None:
    (problem,) = conf.problems({"EXECUTOR": {"LEASE_SECONDS": value}})
    assert "LEASE_SECONDS" in problem


def test_every_problem_is_reported_at_once() -> None:
    problems = conf.problems({"RECORDING": {"MAX_PAYLOAD_BYTES": 512}, "CAPTURE": {"LEASE_SECONDS": 2, "X": 1}})

    assert len(problems) == 3


def test_manage_py_check_reports_the_bad_key() -> None:
    with (
        override_settings(WORKFLOWS={"CAPTURE": {"LEASE_SECONDS": 2}}),
        pytest.raises(SystemCheckError, match=r"workflows\.E001.*'CAPTURE'\]\['LEASE_SECONDS'\]"),
    ):
        call_command("check")


@pytest.mark.slow
def test_start_up_fails_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "bad_settings.py").write_text(
        'from config.settings import *  # noqa: F403\nWORKFLOWS = {"RECORDING": {"MAX_PAYLOAD_BYTES": 512}}\n'
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bad_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }

    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "MAX_PAYLOAD_BYTES" in result.stderr
