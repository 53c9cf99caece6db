"""Harness settings. Everything deployment-specific comes from the environment
through the typed readers in ``harness_site.env``; a bad value stops the process at
start with the variable named."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from harness_site.env import SettingError, env_bool, env_float, env_int, env_list, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("HARNESS_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
if DEBUG:
    SECRET_KEY = env_str("SECRET_KEY", "dev-only-not-secret-harness-key-change-me")
else:
    SECRET_KEY = env_str("SECRET_KEY")
    if len(SECRET_KEY) < 32:
        raise SettingError("SECRET_KEY must be at least 32 characters when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", ["http://localhost:8000", "http://127.0.0.1:8000"])

INSTALLED_APPS = [
    "daphne",
    "channels",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "runs",
    "approvals",
    "sandbox",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Workers and the web process share one SQLite file in local mode; waiting for
    # the write lock beats failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0

REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", ("redis", "rediss"))
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("HARNESS_CHANNEL_PREFIX", "harness")},
    }
}
CELERY_BROKER_URL = env_url("CELERY_BROKER_URL", REDIS_URL, ("redis", "rediss"))
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("HARNESS_QUEUE", "harness")
CELERY_TASK_ALWAYS_EAGER = False
# A message whose worker vanished is redelivered after this long; the beat's lease
# sweep usually recovers the run sooner.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("HARNESS_VISIBILITY_TIMEOUT", 300, minimum=10)}
CELERY_BEAT_SCHEDULE = {
    "expire-approvals": {"task": "approvals.expire", "schedule": env_float("HARNESS_BEAT_EXPIRE_SECONDS", 10.0, minimum=1)},
    "sweep-leases": {"task": "runs.sweep_leases", "schedule": env_float("HARNESS_BEAT_SWEEP_SECONDS", 5.0, minimum=1)},
    "sweep-containers": {"task": "sandbox.sweep", "schedule": env_float("HARNESS_BEAT_CONTAINERS_SECONDS", 60.0, minimum=5)},
}
# How long a worker's claim on a run lasts without renewal; the driving worker
# renews it several times per period, so only a dead worker's lease runs out.
HARNESS_LEASE_SECONDS = env_int("HARNESS_LEASE_SECONDS", 30, minimum=2)
HARNESS_KILL_POLL_SECONDS = env_float("HARNESS_KILL_POLL_SECONDS", 0.25, minimum=0.05)

# Values that must never be stored in events or shown on pages (API keys and the
# like); redaction also catches common credential shapes without being told.
HARNESS_SECRET_VALUES = [
    value for name, value in os.environ.items() if any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
]

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

# Large tool outputs live outside the database, addressed by their SHA-256.
ARTIFACT_ROOT = Path(env_str("HARNESS_ARTIFACT_ROOT", str(VAR_DIR / "artifacts")))

# Upper bounds that every contract is intersected with until an admin-edited policy
# exists (a task can never grant itself more than this).
HARNESS_DEFAULT_BUDGET = {
    "max_proposals": env_int("HARNESS_MAX_PROPOSALS", 200, minimum=1),
    "max_tool_calls": env_int("HARNESS_MAX_TOOL_CALLS", 200, minimum=1),
    "max_attempts": env_int("HARNESS_MAX_ATTEMPTS", 5, minimum=1),
    "wall_time_seconds": env_int("HARNESS_WALL_TIME_SECONDS", 3600, minimum=1),
    "max_output_bytes_per_call": env_int("HARNESS_MAX_OUTPUT_BYTES", 1_000_000, minimum=1024),
}
HARNESS_RETRY_BASE_SECONDS = env_float("HARNESS_RETRY_BASE_SECONDS", 0.5)

# Sandbox (Docker) settings; the engine address follows Docker's own DOCKER_HOST.
DOCKER_HOST = env_str("DOCKER_HOST", "unix:///var/run/docker.sock")
SANDBOX_IMAGE = env_str("HARNESS_SANDBOX_IMAGE", "harness-sandbox:latest")
SANDBOX_MEMORY = env_str("HARNESS_SANDBOX_MEMORY", "512m")
SANDBOX_CPUS = env_float("HARNESS_SANDBOX_CPUS", 1.0, minimum=0.1)
SANDBOX_PIDS_LIMIT = env_int("HARNESS_SANDBOX_PIDS_LIMIT", 128, minimum=16)
WORKSPACE_ROOT = Path(env_str("HARNESS_WORKSPACE_ROOT", str(VAR_DIR / "workspaces")))
OUTBOX_DIR = Path(env_str("HARNESS_OUTBOX_DIR", str(VAR_DIR / "outbox")))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
}
