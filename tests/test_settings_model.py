"""The settings are one typed model (harness_site/config.py): every field described,
docs/deploy.md's table printed from it, a secret's value never printed, and a bad
value stops the start naming its variable."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from pydantic import SecretStr

from harness_site.config import (
    BASE_DIR,
    DEPLOY_MD,
    DEV_SECRET_KEY,
    TABLE_END,
    TABLE_START,
    SettingError,
    Settings,
    default,
    load,
    table,
)

SETTINGS_PY = BASE_DIR / "harness_site" / "settings.py"


def start(**env: str) -> subprocess.CompletedProcess[str]:
    """``django.setup()`` on the production settings in a fresh process, with ``env``
    over this one's environment (less the test session's DEBUG and database)."""
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        capture_output=True,
        text=True,
        cwd=BASE_DIR,
        env={**base, "DJANGO_SETTINGS_MODULE": "harness_site.settings", "DEBUG": "1", **env},
    )


def test_it_describes_every_setting() -> None:
    undescribed = [name for name, field in Settings.model_fields.items() if not (field.description or "").strip()]
    assert undescribed == []
    assert len(Settings.model_fields) > 100


def test_it_prints_the_table_that_docs_deploy_md_holds() -> None:
    document = DEPLOY_MD.read_text()
    assert document.count(TABLE_START) == 1 and document.count(TABLE_END) == 1
    held = document.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip("\n") + "\n"
    assert held == table(), "docs/deploy.md's settings table is out of date: python3 -m harness_site.config --write"


def test_it_has_a_row_for_every_setting_and_no_other() -> None:
    rows = table().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(Settings.model_fields)
    assert all(row.count(" | ") == 3 for row in rows)  # no cell breaks the table with a '|' of its own


def test_it_says_how_a_computed_default_is_worked_out() -> None:
    """A default computed from other settings (or this machine) is written out in
    words: the table cannot print it, nor should it print this checkout's paths."""
    unexplained = [
        name
        for name, field in Settings.model_fields.items()
        if field.default_factory is not None
        and not (isinstance(field.json_schema_extra, dict) and "shown_default" in field.json_schema_extra)
    ]
    assert unexplained == []
    assert str(BASE_DIR) not in table()


def test_it_never_prints_a_secrets_default() -> None:
    secrets = {name: field for name, field in Settings.model_fields.items() if field.annotation is SecretStr}
    assert {"SECRET_KEY", "OPENAI_API_KEY", "HARNESS_SMTP_PASSWORD_FILE", "HARNESS_METRICS_TOKEN"} <= set(secrets)
    assert all(default(field).startswith("(none") for field in secrets.values())
    assert DEV_SECRET_KEY not in table()


def test_it_keeps_a_secret_out_of_the_models_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-to-be-shown")
    settings = load()
    assert settings.OPENAI_API_KEY.get_secret_value() == "sk-test-not-to-be-shown"
    assert "sk-test-not-to-be-shown" not in repr(settings)


def test_it_reads_a_blank_variable_as_its_default_and_trims_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_LEASE_SECONDS", "   ")
    monkeypatch.setenv("HARNESS_SIGNIN_MAX_FAILURES", " 3 ")
    monkeypatch.setenv("ALLOWED_HOSTS", " a.example , b.example ")
    settings = load()
    assert settings.HARNESS_LEASE_SECONDS == 30
    assert settings.HARNESS_SIGNIN_MAX_FAILURES == 3
    assert settings.ALLOWED_HOSTS == ["a.example", "b.example"]


def test_it_works_out_a_default_from_the_settings_it_depends_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HARNESS_SIGNIN_MAX_FAILURES_PER_USER", "CELERY_BROKER_URL", "HARNESS_NOTIFY_QUEUE", "HARNESS_FORGE_API_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HARNESS_SIGNIN_MAX_FAILURES", "3")
    monkeypatch.setenv("REDIS_URL", "rediss://redis.example:6380/1")
    monkeypatch.setenv("HARNESS_QUEUE", "q")
    monkeypatch.setenv("HARNESS_FORGE", "gitlab")
    monkeypatch.setenv("HARNESS_FORGE_TOKEN", "t")
    monkeypatch.setenv("HARNESS_VAR_DIR", "/srv/harness-var")
    monkeypatch.setenv("DEBUG", "0")
    monkeypatch.setenv("SECRET_KEY", "k" * 40)
    settings = load()
    assert settings.HARNESS_SIGNIN_MAX_FAILURES_PER_USER == 12 and settings.HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS == 30
    assert settings.CELERY_BROKER_URL == "rediss://redis.example:6380/1"
    assert settings.HARNESS_NOTIFY_QUEUE == "q"
    assert settings.HARNESS_FORGE_API_URL == "https://gitlab.com"
    assert str(settings.HARNESS_SPOOL_DIR) == "/srv/harness-var/spool"
    assert settings.DATABASE_URL == "sqlite:////srv/harness-var/harness.sqlite3"
    assert settings.HARNESS_SECURE_COOKIES and settings.HARNESS_HSTS_SECONDS == 365 * 24 * 3600 and not settings.HARNESS_SERVE_STATIC


def test_it_names_every_bad_variable_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_LEASE_SECONDS", "lots")
    monkeypatch.setenv("HARNESS_BEAT_SWEEP_SECONDS", "0.5")
    monkeypatch.setenv("HARNESS_MCP_ALLOWED_URLS", "https://tools.example/a*")
    with pytest.raises(SettingError) as refused:
        load()
    assert str(refused.value).splitlines() == [
        "HARNESS_BEAT_SWEEP_SECONDS must be at least 1, got 0.5",
        "HARNESS_LEASE_SECONDS must be an integer, got 'lots'",
        "HARNESS_MCP_ALLOWED_URLS entry 'https://tools.example/a*': a trailing '*' must follow a '/' (write the directory, ending in '/')",
    ]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HARNESS_SMTP_PORT": "twenty-five"}, "HARNESS_SMTP_PORT must be an integer, got 'twenty-five'"),
        ({"HARNESS_WEBHOOK_MAX_ATTEMPTS": "51"}, "HARNESS_WEBHOOK_MAX_ATTEMPTS must be at most 50, got 51"),
        ({"HARNESS_OIDC_TIMEOUT_SECONDS": "soon"}, "HARNESS_OIDC_TIMEOUT_SECONDS must be a number, got 'soon'"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL must be one of CRITICAL, FATAL, ERROR, WARN, WARNING, INFO, DEBUG, NOTSET; got 'LOUD'"),
        ({"HARNESS_WORKER_HOST": "two words"}, "HARNESS_WORKER_HOST must be 1-100 letters"),
    ],
)
def test_it_stops_the_start_naming_the_variable(env: dict[str, str], named: str) -> None:
    result = start(**env)
    assert result.returncode != 0
    assert f"harness_site.config.SettingError: {named}" in result.stderr


def test_it_starts_with_the_defaults() -> None:
    result = start()
    assert result.returncode == 0, result.stderr


def test_it_reads_the_environment_in_settings_py_only_through_the_model() -> None:
    """settings.py reads no variable of its own: the model has them all. What is left
    is process plumbing: the secret scan over every variable (whatever its name, for
    redaction) and the export of PROMETHEUS_MULTIPROC_DIR to prometheus-client."""
    reads = []
    for node in ast.walk(ast.parse(SETTINGS_PY.read_text())):
        if isinstance(node, ast.Attribute) and ast.unparse(node) in ("os.getenv", "os.environ.get", "os.environ.setdefault"):
            reads.append(ast.unparse(node))
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and isinstance(node.ctx, ast.Load):
            reads.append(ast.unparse(node))
    assert reads == []
    assert "os.environ.items()" in SETTINGS_PY.read_text()
