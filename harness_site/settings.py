"""Harness settings. Everything deployment-specific comes from the environment
through the typed readers in ``harness_site.env``; a bad value stops the process at
start with the variable named."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Literal

import dj_database_url

from harness_site.env import (
    SettingError,
    env_bool,
    env_choice,
    env_float,
    env_identity,
    env_int,
    env_list,
    env_networks,
    env_secret_file,
    env_str,
    env_url,
)
from sandbox.public import UnsafeURL, allowlist

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("HARNESS_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
if DEBUG:
    SECRET_KEY = env_str("SECRET_KEY", "dev-only-not-secret-harness-key-change-me")
else:
    SECRET_KEY = env_str("SECRET_KEY")
    if len(SECRET_KEY) < 32:
        raise SettingError("SECRET_KEY must be at least 32 characters when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", ["http://localhost:8000", "http://127.0.0.1:8000"])

INSTALLED_APPS = [
    "daphne",
    "channels",
    "harness_site.apps.HarnessAdminConfig",  # the admin, open to project admins too
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "projects",
    "runs",
    "approvals",
    "live",
    "pages",  # an app for its template tags (harness, diffs)
    "rest_framework",
    "drf_spectacular",
    "api",
    "notifications",
    "monitoring",
    "signin",
    "site_admin",
]

# Sign-in (issue 31): local passwords (Django's ModelBackend, on unless
# HARNESS_PASSWORD_SIGNIN=0) and/or the company's OpenID provider (signin.backend, on
# when HARNESS_OIDC_ISSUER is set). mozilla-django-oidc reads the OIDC_* names below;
# the endpoints come from the issuer's discovery document unless set one by one.
HARNESS_PASSWORD_SIGNIN = env_bool("HARNESS_PASSWORD_SIGNIN", True)
HARNESS_OIDC_ISSUER = env_url("HARNESS_OIDC_ISSUER", "http://unset", ("http", "https")).rstrip("/")
HARNESS_OIDC_ENABLED = HARNESS_OIDC_ISSUER != "http://unset"
HARNESS_OIDC_NAME = env_str("HARNESS_OIDC_NAME", "your company account")
OIDC_RP_CLIENT_ID = env_str("HARNESS_OIDC_CLIENT_ID", "" if not HARNESS_OIDC_ENABLED else None)
OIDC_RP_CLIENT_SECRET = env_secret_file("HARNESS_OIDC_CLIENT_SECRET_FILE")
if HARNESS_OIDC_ENABLED and not OIDC_RP_CLIENT_SECRET:
    raise SettingError("HARNESS_OIDC_ISSUER is set: HARNESS_OIDC_CLIENT_SECRET_FILE must name the client secret's file")
if not HARNESS_PASSWORD_SIGNIN and not HARNESS_OIDC_ENABLED:
    raise SettingError("HARNESS_PASSWORD_SIGNIN=0 leaves no way to sign in: set HARNESS_OIDC_ISSUER too")
OIDC_RP_SCOPES = " ".join(env_list("HARNESS_OIDC_SCOPES", ["openid", "email", "profile"])).replace(",", " ")
OIDC_RP_SIGN_ALGO = env_choice("HARNESS_OIDC_SIGN_ALGO", "RS256", ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256"))
HARNESS_OIDC_GROUPS_CLAIM = env_str("HARNESS_OIDC_GROUPS_CLAIM", "groups")
HARNESS_OIDC_USERNAME_CLAIM = env_str("HARNESS_OIDC_USERNAME_CLAIM", "preferred_username")
# Empty: everyone the provider signs in may enter (with no role until a group gives one).
HARNESS_OIDC_ALLOWED_GROUPS = env_list("HARNESS_OIDC_ALLOWED_GROUPS", [])
HARNESS_OIDC_ENDPOINTS = {
    key: env_url(f"HARNESS_OIDC_{key.upper()}_ENDPOINT", "", ("http", "https"))
    if env_str(f"HARNESS_OIDC_{key.upper()}_ENDPOINT", "")
    else ""
    for key in ("authorization", "token", "userinfo", "jwks")
}
OIDC_TIMEOUT = env_float("HARNESS_OIDC_TIMEOUT_SECONDS", 10.0, minimum=0.5)
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc-callback"
# Passwords and global roles (Django's own), then roles held in a project (projects.access):
# an object of a project is checked against its project's roles alone. The provider's
# backend also answers global permissions (it is a ModelBackend), so with passwords off
# the roles still hold.
AUTHENTICATION_BACKENDS = [
    *(["django.contrib.auth.backends.ModelBackend"] if HARNESS_PASSWORD_SIGNIN else []),
    *(["signin.backend.ProviderBackend"] if HARNESS_OIDC_ENABLED else []),
    "projects.access.ProjectBackend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "harness_site.security.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "harness_site.urls"

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

WSGI_APPLICATION = "harness_site.wsgi.application"
ASGI_APPLICATION = "harness_site.asgi.application"

DATABASE_URL = env_url(
    "DATABASE_URL",
    f"sqlite:///{VAR_DIR / 'harness.sqlite3'}",
    ("sqlite", "postgres", "postgresql"),
)
# Read whatever the database, so a bad value fails at start on every install.
DB_PREPARE = env_bool("HARNESS_DB_PREPARE", True)
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Workers and the web process share one SQLite file in local mode; waiting for
    # the write lock beats failing with "database is locked".
    # WAL lets the web process read while a worker writes, and with synchronous=NORMAL
    # a commit does not wait for a full fsync (a power loss may lose the last commits,
    # never corrupt the file): local mode only, production runs on PostgreSQL.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    # The checkpoint's statements bind their values on the server (runs.persistence.rows) and come
    # in a few shapes a step repeats; prepared once a shape is seen twice, the server
    # skips parsing and planning them (a third of a durable step's time on the server).
    # Django's own statements bind on the client and are never prepared. A connection
    # pooler that cannot keep prepared statements (PgBouncer in transaction mode before
    # 1.21, or without max_prepared_statements) needs HARNESS_DB_PREPARE=false.
    DATABASES["default"]["OPTIONS"] = {"prepare_threshold": 2 if DB_PREPARE else None}

REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", ("redis", "rediss"))
# Live events go out by Redis pub/sub: one PUBLISH per broadcast, fanned out to the
# viewers inside each ASGI process. The default list-based layer queues a copy per
# viewer in Redis and pops them one by one, which cannot keep up with 20 viewers at
# 200 events/s. Pub/sub delivers at most once; the trace consumer fills any gap from
# the database (the record), so nothing is lost for good.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("HARNESS_CHANNEL_PREFIX", "harness")},
    }
}
# The shared cache: counters every web process must agree on (failed sign-ins).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env_str("HARNESS_CACHE_PREFIX", "harness"),
    }
}
HARNESS_SIGNIN_MAX_FAILURES = env_int("HARNESS_SIGNIN_MAX_FAILURES", 5, minimum=1)
HARNESS_SIGNIN_WINDOW_SECONDS = env_int("HARNESS_SIGNIN_WINDOW_SECONDS", 900, minimum=1)
# Wider limits: one account guessed from many addresses, one address trying many accounts.
HARNESS_SIGNIN_MAX_FAILURES_PER_USER = env_int("HARNESS_SIGNIN_MAX_FAILURES_PER_USER", 4 * HARNESS_SIGNIN_MAX_FAILURES, minimum=1)
HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS = env_int("HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS", 10 * HARNESS_SIGNIN_MAX_FAILURES, minimum=1)
CELERY_BROKER_URL = env_url("CELERY_BROKER_URL", REDIS_URL, ("redis", "rediss"))
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A broker outage must not cancel a run in flight: the database is the record, and the
# run's lease keeps it single-driver whatever the broker redelivers later.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = env_str("HARNESS_QUEUE", "harness")
# A message whose worker vanished is redelivered after this long; the beat's lease
# sweep usually recovers the run sooner.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("HARNESS_VISIBILITY_TIMEOUT", 300, minimum=10)}
CELERY_BEAT_SCHEDULE = {
    "expire-approvals": {"task": "approvals.expire", "schedule": env_float("HARNESS_BEAT_EXPIRE_SECONDS", 10.0, minimum=1)},
    "sweep-leases": {"task": "runs.sweep_leases", "schedule": env_float("HARNESS_BEAT_SWEEP_SECONDS", 5.0, minimum=1)},
    "sweep-containers": {"task": "sandbox.sweep", "schedule": env_float("HARNESS_BEAT_CONTAINERS_SECONDS", 60.0, minimum=1)},
    "notifications-sweep": {"task": "notifications.sweep", "schedule": env_float("HARNESS_BEAT_NOTIFY_SECONDS", 30.0, minimum=1)},
    "mail-reminders": {"task": "notifications.remind", "schedule": env_float("HARNESS_BEAT_REMIND_SECONDS", 60.0, minimum=1)},
    "artifact-retention": {
        "task": "runs.delete_expired_artifacts",
        "schedule": env_float("HARNESS_BEAT_RETENTION_SECONDS", 3600.0, minimum=1),
    },
}
# How long a worker's claim on a run lasts without renewal; the driving worker
# renews it several times per period, so only a dead worker's lease runs out.
HARNESS_LEASE_SECONDS = env_int("HARNESS_LEASE_SECONDS", 30, minimum=2)
# Every checkpoint compares the stored state with the fold of the stored log (runs.persistence.store:
# a test-suite setting, costing a read of the run's whole log per checkpoint).
HARNESS_VERIFY_FOLD = env_bool("HARNESS_VERIFY_FOLD", False)
# The name of this worker's host: the runs it prepares keep their workspace on its disk
# and are resumed there while its heartbeat lasts (one lease period; docs/deploy.md).
# Workers that share a disk may share a name; two hosts must never share one.
HARNESS_WORKER_HOST = env_str("HARNESS_WORKER_HOST", socket.gethostname() or "localhost")
if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}", HARNESS_WORKER_HOST):
    raise SettingError(f"HARNESS_WORKER_HOST must be 1-100 letters, digits, '.', '_', ':' or '-', got {HARNESS_WORKER_HOST!r}")
# Free space a worker's disk keeps: checks are refused, or stopped, below it.
HARNESS_DISK_RESERVE_MB = env_int("HARNESS_DISK_RESERVE_MB", 1024, minimum=0)
# What one check may store of its output (the rest is counted, not kept), and what one
# run's artifacts may hold together: past it the run runs no more checks.
HARNESS_CHECK_OUTPUT_MAX_MB = env_int("HARNESS_CHECK_OUTPUT_MAX_MB", 8, minimum=1, maximum=4096)
# Egress connection events recorded per check call; past it one event counts the rest.
HARNESS_EGRESS_MAX_EVENTS_PER_CALL = env_int("HARNESS_EGRESS_MAX_EVENTS_PER_CALL", 200, minimum=1, maximum=100_000)
HARNESS_RUN_ARTIFACTS_MAX_MB = env_int("HARNESS_RUN_ARTIFACTS_MAX_MB", 512, minimum=1)
HARNESS_KILL_POLL_SECONDS = env_float("HARNESS_KILL_POLL_SECONDS", 0.25, minimum=0.05)
# The most of a publish's diff a reviewer is shown; a larger one lists what is too
# large to show and cannot be granted as it is (docs/performance.md: what a page costs).
HARNESS_REVIEW_DIFF_MAX_BYTES = env_int("HARNESS_REVIEW_DIFF_MAX_BYTES", 2_000_000, minimum=1000)
HARNESS_REVIEW_DIFF_MAX_LINES = env_int("HARNESS_REVIEW_DIFF_MAX_LINES", 100_000, minimum=100)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Artifacts (check output, large tool results, published patches), addressed by their
# SHA-256, live in the database (the default) or an S3-compatible bucket; no page reads
# a worker's disk (docs/design.md, Storage). A worker spools a check's output in flight
# under HARNESS_SPOOL_DIR, its own disk, and hands it to the store when the check ends.
HARNESS_ARTIFACT_STORE: Literal["database", "s3"] = env_choice("HARNESS_ARTIFACT_STORE", "database", ("database", "s3"))
SPOOL_DIR = Path(env_str("HARNESS_SPOOL_DIR", str(VAR_DIR / "spool")))
# Artifacts of runs that ended more than this many days ago are deleted by the beat
# (runs.persistence.retention), unless a newer run stored the same content; 0 keeps them all.
HARNESS_ARTIFACT_RETENTION_DAYS = env_int("HARNESS_ARTIFACT_RETENTION_DAYS", 0, minimum=0)
STORAGES: dict[str, dict[str, object]] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
if HARNESS_ARTIFACT_STORE == "s3":
    # django-storages' S3 backend (boto3). Without keys, boto3's own chain (instance
    # role, AWS_* variables, ~/.aws) supplies the credentials.
    _s3_keys = (env_str("HARNESS_S3_ACCESS_KEY_ID", ""), env_str("HARNESS_S3_SECRET_ACCESS_KEY", ""))
    if any(_s3_keys) and not all(_s3_keys):
        raise SettingError("HARNESS_S3_ACCESS_KEY_ID and HARNESS_S3_SECRET_ACCESS_KEY are set together or not at all")
    from harness_site.bucket import s3_storage

    STORAGES["artifacts"] = s3_storage(
        bucket=env_str("HARNESS_S3_BUCKET"),
        prefix=env_str("HARNESS_S3_PREFIX", "artifacts"),
        # Another S3-compatible service (MinIO, Ceph, a cloud's own): its URL.
        endpoint_url=env_url("HARNESS_S3_ENDPOINT_URL", "", ("http", "https")) if env_str("HARNESS_S3_ENDPOINT_URL", "") else None,
        region=env_str("HARNESS_S3_REGION", "") or None,
        access_key=_s3_keys[0] or None,
        secret_key=_s3_keys[1] or None,
        addressing_style=env_choice("HARNESS_S3_ADDRESSING_STYLE", "auto", ("auto", "path", "virtual")),
    )

# The first retry's backoff (core.context.HarnessConfig); the budget's upper bounds
# are the policy's (approvals/default_policy.json until an admin edits one).
HARNESS_RETRY_BASE_SECONDS = env_float("HARNESS_RETRY_BASE_SECONDS", 0.5)

# Sandbox (Docker) settings; the engine address follows Docker's own DOCKER_HOST.
DOCKER_HOST = env_str("DOCKER_HOST", "unix:///var/run/docker.sock")
SANDBOX_IMAGE = env_str("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest")
# Container limits (memory, CPUs, pids) come from the run's policy, edited in the admin.
# The scope labels this installation's containers, so its sweeper never removes
# another installation's (or test session's) containers on the same engine.
SANDBOX_SCOPE = env_str("HARNESS_SANDBOX_SCOPE", "default")
# How long one attempt waits for an engine that does not answer (the run's deadline
# may end the wait sooner); then the attempt fails and the harness's retries go on.
SANDBOX_ENGINE_WAIT_SECONDS = env_float("HARNESS_SANDBOX_ENGINE_WAIT_SECONDS", 300.0, minimum=1.0)
WORKSPACE_ROOT = Path(env_str("HARNESS_WORKSPACE_ROOT", str(VAR_DIR / "workspaces")))
# Where contracts may take their workspace from (local paths, git repositories and
# archives); anything else is refused, so starting a run cannot read server files.
WORKSPACE_SOURCES = [Path(p) for p in env_list("HARNESS_WORKSPACE_SOURCES", [str(BASE_DIR / "examples")])]
# Git remotes a run may clone from and publish to: URL prefixes ending in "/" or exact
# repository URLs, compared part by part (sandbox/vcs/allowlist.py, docs/deploy.md); none
# by default. The token or SSH key is read by the worker's git process only.
GIT_ALLOWED_REMOTES = env_list("HARNESS_GIT_ALLOWED_REMOTES", [])
try:
    allowlist(GIT_ALLOWED_REMOTES)
except UnsafeURL as exc:
    raise SettingError(str(exc)) from None
# Where the projects' MCP servers may be (docs/design.md, Outside tools): URL prefixes
# ending in "/" or exact endpoint URLs, compared part by part as the git remotes are;
# none by default. A server's token is read from the variable its row names.
MCP_ALLOWED_URLS = env_list("HARNESS_MCP_ALLOWED_URLS", [])
try:
    allowlist(MCP_ALLOWED_URLS)
except UnsafeURL as exc:
    raise SettingError(str(exc)) from None
GIT_TOKEN = env_str("HARNESS_GIT_TOKEN", "")
GIT_TOKEN_FILE = env_str("HARNESS_GIT_TOKEN_FILE", "") or None
GIT_TOKEN_USER = env_str("HARNESS_GIT_TOKEN_USER", "x-access-token")
GIT_SSH_KEY_FILE = env_str("HARNESS_GIT_SSH_KEY_FILE", "") or None
GIT_SSH_KNOWN_HOSTS = env_str("HARNESS_GIT_SSH_KNOWN_HOSTS", "") or None
GIT_AUTHOR = env_identity("HARNESS_GIT_AUTHOR", "Harness <harness@localhost>")
GIT_TIMEOUT_SECONDS = env_float("HARNESS_GIT_TIMEOUT_SECONDS", 120.0, minimum=1.0)
# A clone that fails for a passing network reason is tried this many times in all,
# waiting 1s, 2s, 4s... (at most HARNESS_GIT_CLONE_BACKOFF_MAX_SECONDS) in between.
GIT_CLONE_ATTEMPTS = env_int("HARNESS_GIT_CLONE_ATTEMPTS", 4, minimum=1, maximum=20)
GIT_CLONE_BACKOFF_SECONDS = env_float("HARNESS_GIT_CLONE_BACKOFF_SECONDS", 1.0, minimum=0.0)
GIT_CLONE_BACKOFF_MAX_SECONDS = env_float("HARNESS_GIT_CLONE_BACKOFF_MAX_SECONDS", 30.0, minimum=0.0)
# The forge open_change_request opens pull requests (GitHub) or merge requests
# (GitLab) on; none by default. Its project is HARNESS_FORGE_PROJECT or the path of
# the run's remote. The token is read by the worker's forge client only.
FORGE = env_choice("HARNESS_FORGE", "", ("", "github", "gitlab"))
_FORGE_DEFAULTS = {"github": ("https://api.github.com", "https://github.com"), "gitlab": ("https://gitlab.com", "https://gitlab.com")}
_forge_api, _forge_web = _FORGE_DEFAULTS.get(FORGE, _FORGE_DEFAULTS["github"])
# GitHub's REST root (GitHub Enterprise: https://host/api/v3); GitLab's instance URL.
FORGE_API_URL = env_url("HARNESS_FORGE_API_URL", _forge_api, ("http", "https"))
# Links on the run page go only to pages under this URL.
FORGE_WEB_URL = env_url("HARNESS_FORGE_WEB_URL", _forge_web, ("http", "https"))
FORGE_PROJECT = env_str("HARNESS_FORGE_PROJECT", "") or None
FORGE_TOKEN = env_str("HARNESS_FORGE_TOKEN", "")
FORGE_TOKEN_FILE = env_str("HARNESS_FORGE_TOKEN_FILE", "") or None
FORGE_TIMEOUT_SECONDS = env_float("HARNESS_FORGE_TIMEOUT_SECONDS", 30.0, minimum=1.0)
if FORGE and not (FORGE_TOKEN or FORGE_TOKEN_FILE):
    raise SettingError("HARNESS_FORGE is set: HARNESS_FORGE_TOKEN or HARNESS_FORGE_TOKEN_FILE is required")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
}

# ---------------------------------------------------------------------------------
# Model adapters (adapters; issue 6). API keys come from here only: never from a
# run's configuration, and never stored in run state, events or proposer snapshots.
# ---------------------------------------------------------------------------------
from adapters.pricing import parse_price_table  # noqa: E402 - plain Python, no Django

OPENAI_API_KEY = env_str("OPENAI_API_KEY", "")
OPENAI_BASE_URL = env_url("OPENAI_BASE_URL", "https://api.openai.com/v1", ("http", "https"))
ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = env_url("ANTHROPIC_BASE_URL", "https://api.anthropic.com", ("http", "https"))
# A run may pick another base URL (vLLM, Ollama, llama.cpp server...) only from these
# lists: the server's API key is sent to whatever URL a run names.
OPENAI_ALLOWED_BASE_URLS = sorted({OPENAI_BASE_URL, *env_list("HARNESS_OPENAI_ALLOWED_BASE_URLS", [])})
ANTHROPIC_ALLOWED_BASE_URLS = sorted({ANTHROPIC_BASE_URL, *env_list("HARNESS_ANTHROPIC_ALLOWED_BASE_URLS", [])})
# The Chat Completions field that caps a reply: "auto" sends max_completion_tokens to
# api.openai.com (its reasoning models refuse max_tokens) and max_tokens elsewhere.
HARNESS_OPENAI_OUTPUT_LIMIT: Literal["auto", "max_tokens", "max_completion_tokens"] = env_choice(
    "HARNESS_OPENAI_OUTPUT_LIMIT", "auto", ("auto", "max_tokens", "max_completion_tokens")
)

# Server-wide caps per run; a run's own max_tokens / max_cost_usd are intersected with them.
HARNESS_MODEL_MAX_TOKENS = env_int("HARNESS_MODEL_MAX_TOKENS", 2_000_000, minimum=1)
HARNESS_MODEL_MAX_COST_USD = env_float("HARNESS_MODEL_MAX_COST_USD", 10.0, minimum=0.0001)
HARNESS_MODEL_MAX_OUTPUT_TOKENS = env_int("HARNESS_MODEL_MAX_OUTPUT_TOKENS", 4096, minimum=16, maximum=200_000)
HARNESS_MODEL_TIMEOUT_SECONDS = env_float("HARNESS_MODEL_TIMEOUT_SECONDS", 120.0, minimum=1.0)
HARNESS_MODEL_MAX_RETRIES = env_int("HARNESS_MODEL_MAX_RETRIES", 4, minimum=0, maximum=20)
HARNESS_MODEL_RETRY_BASE_SECONDS = env_float("HARNESS_MODEL_RETRY_BASE_SECONDS", 1.0, minimum=0.0)
HARNESS_MODEL_RETRY_MAX_SECONDS = env_float("HARNESS_MODEL_RETRY_MAX_SECONDS", 60.0, minimum=0.0)
HARNESS_MODEL_MAX_RESULT_CHARS = env_int("HARNESS_MODEL_MAX_RESULT_CHARS", 12_000, minimum=1000)

# USD per million tokens, {"model": {"input": x, "output": y}}; a dated variant uses its
# base model's entry, and "*" prices every model not listed (e.g. {"*": {"input": 0,
# "output": 0}} for local models). List prices when written; override in production.
_DEFAULT_MODEL_PRICES = """{
  "gpt-4o": {"input": 2.5, "output": 10.0},
  "gpt-4o-mini": {"input": 0.15, "output": 0.6},
  "gpt-4.1": {"input": 2.0, "output": 8.0},
  "gpt-4.1-mini": {"input": 0.4, "output": 1.6},
  "gpt-4.1-nano": {"input": 0.1, "output": 0.4},
  "o4-mini": {"input": 1.1, "output": 4.4},
  "claude-opus-4-1": {"input": 15.0, "output": 75.0},
  "claude-sonnet-4": {"input": 3.0, "output": 15.0},
  "claude-sonnet-4-5": {"input": 3.0, "output": 15.0},
  "claude-sonnet-4-6": {"input": 3.0, "output": 15.0},
  "claude-haiku-4-5": {"input": 1.0, "output": 5.0},
  "claude-3-5-haiku": {"input": 0.8, "output": 4.0}
}"""
try:
    HARNESS_MODEL_PRICES = {
        model: {"input": price.input_per_mtok, "output": price.output_per_mtok}
        for model, price in parse_price_table(env_str("HARNESS_MODEL_PRICES", _DEFAULT_MODEL_PRICES)).items()
    }
except ValueError as exc:
    raise SettingError(f"HARNESS_MODEL_PRICES: {exc}") from None

# Values that must never be stored in events or shown on pages (API keys and the
# like); redaction also catches common credential shapes without being told.
HARNESS_SECRET_VALUES = sorted(
    {value for name, value in os.environ.items() if any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))}
    | {key for key in (OPENAI_API_KEY, ANTHROPIC_API_KEY) if key}
)

# ---------------------------------------------------------------------------------
# Web dashboard (issue 5): static files, sign-in, cookies, Content-Security-Policy.
# ---------------------------------------------------------------------------------
STATICFILES_DIRS = [BASE_DIR / "static"]
# Daphne serves the static files itself unless a front server does (production).
HARNESS_SERVE_STATIC = env_bool("HARNESS_SERVE_STATIC", DEBUG)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "login"
# Scripts only from our own static files: injected markup in tool output cannot run
# even if a template ever forgot to escape it.
HARNESS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = env_int("HARNESS_SESSION_SECONDS", 12 * 3600, minimum=300)
# Every form is server-rendered with its token, so no script needs the CSRF cookie.
CSRF_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("HARNESS_SECURE_COOKIES", not DEBUG)
# Once a browser has seen the site over HTTPS it refuses plain HTTP for a year (sent
# only on HTTPS responses; behind a TLS proxy set HARNESS_BEHIND_TLS_PROXY=1 so Django
# knows a request came over HTTPS).
SECURE_HSTS_SECONDS = env_int("HARNESS_HSTS_SECONDS", 0 if DEBUG else 365 * 24 * 3600, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("HARNESS_HSTS_INCLUDE_SUBDOMAINS", False)
if env_bool("HARNESS_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
HARNESS_TRACE_WINDOW = env_int("HARNESS_TRACE_WINDOW", 200, minimum=20, maximum=2000)
# How long a web process's live feed (live.feeds) waits without a doorbell before it
# reads the database anyway, for a doorbell that never came.
HARNESS_TRACE_RECHECK_SECONDS = env_float("HARNESS_TRACE_RECHECK_SECONDS", 5.0, minimum=0.1)
# Every live socket speaks at least this often, so a page can tell a quiet run from
# a dead connection (live.lists).
HARNESS_LIVE_HEARTBEAT_SECONDS = env_float("HARNESS_LIVE_HEARTBEAT_SECONDS", 5.0, minimum=0.1)

# ---------------------------------------------------------------------------------
# REST API and webhook notifications (api/, notifications/; issue 7).
# ---------------------------------------------------------------------------------
# API tokens are kept hashed (api.models.ApiToken) and last this many days.
# Whether a policy may let whoever starts a run approve its requests alone. The
# deployment decides, not an admin (docs/design.md, Approvals): off, no policy
# version can turn it on, and versions saved earlier with it on have no effect.
HARNESS_ALLOW_SELF_APPROVAL = env_bool("HARNESS_ALLOW_SELF_APPROVAL", False)
HARNESS_API_TOKEN_DAYS = env_int("HARNESS_API_TOKEN_DAYS", 30, minimum=1, maximum=3650)

REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header turns a missing login into 401, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    # No OPTIONS self-description and no ?format= switch: the OpenAPI schema
    # describes the API, and every query parameter is one the schema lists.
    "DEFAULT_METADATA_CLASS": None,
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Harness API",
    "DESCRIPTION": "Runs, their events and reports, approvals and the kill switch. "
    "Authenticate with `Authorization: Token <key>` (or a browser session).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema maps every endpoint and field: for signed-in people only.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.models.Run.Status",
        "ApprovalStatusEnum": "approvals.models.ApprovalRequest.Status",
    },
}

# Links in notifications point here (the address people reach the web service at).
HARNESS_PUBLIC_URL = env_url("HARNESS_PUBLIC_URL", "http://localhost:8000", ("http", "https")).rstrip("/")
HARNESS_WEBHOOK_TIMEOUT_SECONDS = env_float("HARNESS_WEBHOOK_TIMEOUT_SECONDS", 10.0, minimum=0.5)
# Host names and networks (CIDR) webhooks may reach although they are not public
# addresses (a receiver on the private network); everything else must be public.
HARNESS_WEBHOOK_ALLOWED_HOSTS = env_list("HARNESS_WEBHOOK_ALLOWED_HOSTS", [])
HARNESS_WEBHOOK_MAX_ATTEMPTS = env_int("HARNESS_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1, maximum=50)
# Attempt n waits base * 2**(n-1) seconds, capped; about 20 minutes over 8 attempts.
HARNESS_WEBHOOK_RETRY_BASE_SECONDS = env_float("HARNESS_WEBHOOK_RETRY_BASE_SECONDS", 10.0, minimum=0.01)
HARNESS_WEBHOOK_RETRY_MAX_SECONDS = env_float("HARNESS_WEBHOOK_RETRY_MAX_SECONDS", 3600.0, minimum=0.01)
# Email to reviewers and requesters (notifications/mail.py) through an SMTP relay.
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = env_str("HARNESS_SMTP_HOST", "localhost")
EMAIL_PORT = env_int("HARNESS_SMTP_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("HARNESS_SMTP_USER", "")
EMAIL_HOST_PASSWORD = env_secret_file("HARNESS_SMTP_PASSWORD_FILE")
_smtp_security = env_choice("HARNESS_SMTP_SECURITY", "starttls", ("none", "starttls", "tls"))
EMAIL_USE_TLS = _smtp_security == "starttls"
EMAIL_USE_SSL = _smtp_security == "tls"
EMAIL_TIMEOUT = env_int("HARNESS_SMTP_TIMEOUT_SECONDS", 20, minimum=1)
DEFAULT_FROM_EMAIL = env_str("HARNESS_MAIL_FROM", "Harness <harness@localhost>")
HARNESS_MAIL_ENABLED = env_bool("HARNESS_MAIL", False)
# A local mail catcher's page of what it received (`make up` starts one and sets this):
# the mail settings page links to it. Empty: no catcher, no link.
HARNESS_MAIL_CATCHER_URL = env_str("HARNESS_MAIL_CATCHER_URL", "")
# Requests for one person within this window go out as one mail.
HARNESS_MAIL_DIGEST_SECONDS = env_float("HARNESS_MAIL_DIGEST_SECONDS", 60.0, minimum=0.0)
# A reviewer who has not decided is reminded this long before a request expires.
HARNESS_MAIL_REMIND_BEFORE_SECONDS = env_float("HARNESS_MAIL_REMIND_BEFORE_SECONDS", 3600.0, minimum=0.0)
HARNESS_MAIL_MAX_ATTEMPTS = env_int("HARNESS_MAIL_MAX_ATTEMPTS", 8, minimum=1, maximum=50)
HARNESS_MAIL_RETRY_BASE_SECONDS = env_float("HARNESS_MAIL_RETRY_BASE_SECONDS", 30.0, minimum=0.01)
HARNESS_MAIL_RETRY_MAX_SECONDS = env_float("HARNESS_MAIL_RETRY_MAX_SECONDS", 3600.0, minimum=0.01)
# Deliveries go to their own queue when set, so a slow receiver never delays runs.
CELERY_TASK_ROUTES = {"notifications.*": {"queue": env_str("HARNESS_NOTIFY_QUEUE", CELERY_TASK_DEFAULT_QUEUE)}}

# Metrics (docs/deploy.md, Metrics). prometheus-client's multiprocess mode: every process
# of this host (web server, workers, their pool's children) writes its figures into
# files in this directory, and /metrics adds them up. It must be in the environment
# before prometheus_client is first imported, which the apps do after these settings.
PROMETHEUS_MULTIPROC_DIR = Path(env_str("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "metrics")))
PROMETHEUS_MULTIPROC_DIR.mkdir(parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(PROMETHEUS_MULTIPROC_DIR)
# Off: no process counts the event log's figures (/metrics still answers, with the
# database's gauges and the counters kept outside the log).
HARNESS_METRICS_ENABLED = env_bool("HARNESS_METRICS_ENABLED", True)
# Who may read /metrics: a bearer token (Authorization: Bearer <token>), or a client
# address in one of these networks. Empty token: only the networks.
HARNESS_METRICS_TOKEN = env_str("HARNESS_METRICS_TOKEN", "")
HARNESS_METRICS_NETWORKS = env_networks("HARNESS_METRICS_NETWORKS", ["127.0.0.1/32", "::1/128"])
# A worker on a host without a web server serves its host's figures itself on this
# port (0: it does not); on the address below, which only the scraper should reach.
HARNESS_WORKER_METRICS_PORT = env_int("HARNESS_WORKER_METRICS_PORT", 0, minimum=0, maximum=65535)
HARNESS_WORKER_METRICS_ADDRESS = env_str("HARNESS_WORKER_METRICS_ADDRESS", "127.0.0.1")
# Traces of runs over OTLP/HTTP (docs/deploy.md, Traces): off unless the collector's
# traces URL is set (e.g. http://collector:4318/v1/traces).
HARNESS_TRACES_URL = env_str("HARNESS_TRACES_URL", "")
if HARNESS_TRACES_URL:
    env_url("HARNESS_TRACES_URL", "", ("http", "https"))
HARNESS_TRACES_SERVICE_NAME = env_str("HARNESS_TRACES_SERVICE_NAME", "harness")
HARNESS_TRACES_TIMEOUT_SECONDS = env_float("HARNESS_TRACES_TIMEOUT_SECONDS", 10.0, minimum=0.5)
# How long finished spans wait to be sent together.
HARNESS_TRACES_DELAY_MS = env_int("HARNESS_TRACES_DELAY_MS", 1000, minimum=10)
