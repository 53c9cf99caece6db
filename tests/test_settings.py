"""Settings come from the environment; a bad value stops the start with its name."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

SETTINGS = Path(__file__).resolve().parent.parent / "harness_site" / "settings.py"


def start(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-c", "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='harness_site.settings'; django.setup()"],
        capture_output=True,
        text=True,
        env={**base, **env},
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DEBUG": "maybe"}, "DEBUG must be a boolean"),
        ({"DEBUG": "0"}, "SECRET_KEY is required"),
        ({"DEBUG": "0", "SECRET_KEY": "short"}, "SECRET_KEY must be at least 32"),
        ({"DEBUG": "1", "DATABASE_URL": "mysql://x"}, "DATABASE_URL must be a URL starting with"),
        ({"DEBUG": "1", "REDIS_URL": "localhost:6379"}, "REDIS_URL must be a URL"),
        ({"DEBUG": "1", "HARNESS_LEASE_SECONDS": "lots"}, "HARNESS_LEASE_SECONDS must be an integer"),
        ({"DEBUG": "1", "ALLOWED_HOSTS": "a,,b"}, "ALLOWED_HOSTS must be a comma-separated list"),
        ({"DEBUG": "1", "HARNESS_OPENAI_OUTPUT_LIMIT": "max"}, "HARNESS_OPENAI_OUTPUT_LIMIT must be one of auto, max_tokens"),
        ({"DEBUG": "1", "HARNESS_FORGE": "bitbucket"}, "HARNESS_FORGE must be one of"),
        ({"DEBUG": "1", "HARNESS_FORGE": "github"}, "HARNESS_FORGE_TOKEN or HARNESS_FORGE_TOKEN_FILE is required"),
        (
            {"DEBUG": "1", "HARNESS_FORGE": "gitlab", "HARNESS_FORGE_TOKEN": "t", "HARNESS_FORGE_API_URL": "gitlab.com"},
            "HARNESS_FORGE_API_URL must be a URL",
        ),
        ({"DEBUG": "1", "HARNESS_GIT_CLONE_ATTEMPTS": "0"}, "HARNESS_GIT_CLONE_ATTEMPTS"),
        ({"DEBUG": "1", "HARNESS_DB_PREPARE": "sometimes"}, "HARNESS_DB_PREPARE must be a boolean"),
        ({"DEBUG": "1", "HARNESS_ARTIFACT_STORE": "disk"}, "HARNESS_ARTIFACT_STORE must be one of database, s3"),
        ({"DEBUG": "1", "HARNESS_ARTIFACT_STORE": "s3"}, "HARNESS_S3_BUCKET is required"),
        (
            {"DEBUG": "1", "HARNESS_ARTIFACT_STORE": "s3", "HARNESS_S3_BUCKET": "b", "HARNESS_S3_ENDPOINT_URL": "minio:9000"},
            "HARNESS_S3_ENDPOINT_URL must be a URL",
        ),
        (
            {"DEBUG": "1", "HARNESS_ARTIFACT_STORE": "s3", "HARNESS_S3_BUCKET": "b", "HARNESS_S3_ACCESS_KEY_ID": "k"},
            "are set together or not at all",
        ),
        (
            {"DEBUG": "1", "HARNESS_ARTIFACT_STORE": "s3", "HARNESS_S3_BUCKET": "b", "HARNESS_S3_ADDRESSING_STYLE": "dns"},
            "HARNESS_S3_ADDRESSING_STYLE must be one of",
        ),
        ({"DEBUG": "1", "HARNESS_ARTIFACT_RETENTION_DAYS": "-1"}, "HARNESS_ARTIFACT_RETENTION_DAYS must be at least 0"),
        ({"DEBUG": "1", "HARNESS_PASSWORD_SIGNIN": "0"}, "HARNESS_PASSWORD_SIGNIN=0 leaves no way to sign in"),
        ({"DEBUG": "1", "HARNESS_OIDC_ISSUER": "https://id.example.com"}, "HARNESS_OIDC_CLIENT_ID is required"),
        (
            {"DEBUG": "1", "HARNESS_OIDC_ISSUER": "https://id.example.com", "HARNESS_OIDC_CLIENT_ID": "h"},
            "HARNESS_OIDC_CLIENT_SECRET_FILE must name",
        ),
        (
            {
                "DEBUG": "1",
                "HARNESS_OIDC_ISSUER": "https://id.example.com",
                "HARNESS_OIDC_CLIENT_ID": "h",
                "HARNESS_OIDC_CLIENT_SECRET_FILE": "/nonexistent",
            },
            "HARNESS_OIDC_CLIENT_SECRET_FILE names '/nonexistent', which cannot be read",
        ),
        ({"DEBUG": "1", "HARNESS_OIDC_ISSUER": "id.example.com"}, "HARNESS_OIDC_ISSUER must be a URL"),
        ({"DEBUG": "1", "HARNESS_SMTP_SECURITY": "ssl"}, "HARNESS_SMTP_SECURITY must be one of none, starttls, tls"),
    ],
)
def test_it_fails_at_start_naming_the_bad_variable(env: dict[str, str], named: str) -> None:
    result = start(**env)
    assert result.returncode != 0
    assert named in result.stderr


def test_it_starts_with_production_settings_when_they_are_given() -> None:
    result = start(DEBUG="0", SECRET_KEY="x" * 40, ALLOWED_HOSTS="harness.example.com")
    assert result.returncode == 0, result.stderr


def test_it_starts_with_the_artifacts_in_a_bucket_when_one_is_given() -> None:
    result = start(
        DEBUG="1",
        HARNESS_ARTIFACT_STORE="s3",
        HARNESS_S3_BUCKET="harness-artifacts",
        HARNESS_S3_ENDPOINT_URL="http://127.0.0.1:9000",
        HARNESS_S3_ACCESS_KEY_ID="k",
        HARNESS_S3_SECRET_ACCESS_KEY="s",
    )
    assert result.returncode == 0, result.stderr


def _settings_touched(statement: ast.stmt) -> set[str]:
    """The settings (upper-case names) a top-level statement binds or changes: an
    assignment to the name or into it, ``+=``, or a method called on it (``insert``)."""
    touched = set()
    for node in ast.walk(statement):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
            targets = [node.value.func.value]
        for target in targets:
            while isinstance(target, ast.Subscript | ast.Attribute):
                target = target.value
            if isinstance(target, ast.Name) and target.id.isupper():
                touched.add(target.id)
    return touched


def test_it_makes_each_setting_in_one_place() -> None:
    """Whoever reads a setting's definition reads all of it: nothing further down
    sets it again, extends it or changes an item of it (the statements that make it,
    an ``if`` on the database's engine for one, follow each other)."""
    places: dict[str, list[int]] = {}
    for index, statement in enumerate(ast.parse(SETTINGS.read_text()).body):
        for name in _settings_touched(statement):
            places.setdefault(name, []).append(index)
    scattered = {name: at for name, at in places.items() if at != list(range(at[0], at[0] + len(at)))}
    assert scattered == {}
