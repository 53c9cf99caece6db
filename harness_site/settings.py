"""Harness settings. Everything deployment-specific comes from the environment,
read once into the typed model ``harness_site.config.Settings`` (its variables, types,
defaults and descriptions: docs/deploy.md, Every setting); a bad value stops the
process at start with the variable named. A setting passed on as it is says what it
means there, not in a comment here: comments here say what the mapping adds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url

from harness_site.config import load

BASE_DIR = Path(__file__).resolve().parent.parent
# A bad value stops the start here, with SettingError naming each variable that is wrong.
config = load()
VAR_DIR = config.HARNESS_VAR_DIR

DEBUG = config.DEBUG
SECRET_KEY = config.SECRET_KEY.get_secret_value()

ALLOWED_HOSTS = config.ALLOWED_HOSTS
CSRF_TRUSTED_ORIGINS = config.CSRF_TRUSTED_ORIGINS

INSTALLED_APPS = [
    "daphne",
    "channels",
    "harness_site.apps.HarnessAdminConfig",  # the admin, open to project admins too
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ledger",
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
    "trials",
]

# Sign-in (issue 31): local passwords (Django's ModelBackend, on unless
# HARNESS_PASSWORD_SIGNIN=0) and/or the company's OpenID provider (signin.backend, on
# when HARNESS_OIDC_ISSUER is set). mozilla-django-oidc reads the OIDC_* names below;
# the endpoints come from the issuer's discovery document unless set one by one.
HARNESS_PASSWORD_SIGNIN = config.HARNESS_PASSWORD_SIGNIN
HARNESS_OIDC_ISSUER = config.HARNESS_OIDC_ISSUER.rstrip("/")
HARNESS_OIDC_ENABLED = bool(HARNESS_OIDC_ISSUER)
HARNESS_OIDC_NAME = config.HARNESS_OIDC_NAME
OIDC_RP_CLIENT_ID = config.HARNESS_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = config.HARNESS_OIDC_CLIENT_SECRET_FILE.get_secret_value()
OIDC_RP_SCOPES = " ".join(config.HARNESS_OIDC_SCOPES)
OIDC_RP_SIGN_ALGO = config.HARNESS_OIDC_SIGN_ALGO
HARNESS_OIDC_GROUPS_CLAIM = config.HARNESS_OIDC_GROUPS_CLAIM
HARNESS_OIDC_USERNAME_CLAIM = config.HARNESS_OIDC_USERNAME_CLAIM
HARNESS_OIDC_ALLOWED_GROUPS = config.HARNESS_OIDC_ALLOWED_GROUPS
HARNESS_OIDC_ENDPOINTS = {
    "authorization": config.HARNESS_OIDC_AUTHORIZATION_ENDPOINT,
    "token": config.HARNESS_OIDC_TOKEN_ENDPOINT,
    "userinfo": config.HARNESS_OIDC_USERINFO_ENDPOINT,
    "jwks": config.HARNESS_OIDC_JWKS_ENDPOINT,
}
OIDC_TIMEOUT = config.HARNESS_OIDC_TIMEOUT_SECONDS
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

DATABASE_URL = config.DATABASE_URL
DB_PREPARE = config.HARNESS_DB_PREPARE
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's, starting and committing each transaction with less work (a durable step is two).
    DATABASES["default"]["ENGINE"] = "common.sqlite_backend"
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

REDIS_URL = config.REDIS_URL
# Live events go out by Redis pub/sub: one PUBLISH per broadcast, fanned out to the
# viewers inside each ASGI process. The default list-based layer queues a copy per
# viewer in Redis and pops them one by one, which cannot keep up with 20 viewers at
# 200 events/s. Pub/sub delivers at most once; the trace consumer fills any gap from
# the database (the record), so nothing is lost for good.
CHANNEL_LAYERS: dict[str, dict[str, Any]] = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": config.HARNESS_CHANNEL_PREFIX},
    }
}
# The shared cache: counters every web process must agree on (failed sign-ins).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": config.HARNESS_CACHE_PREFIX,
    }
}
HARNESS_SIGNIN_MAX_FAILURES = config.HARNESS_SIGNIN_MAX_FAILURES
HARNESS_SIGNIN_WINDOW_SECONDS = config.HARNESS_SIGNIN_WINDOW_SECONDS
HARNESS_SIGNIN_MAX_FAILURES_PER_USER = config.HARNESS_SIGNIN_MAX_FAILURES_PER_USER
HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS = config.HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS
CELERY_BROKER_URL = config.CELERY_BROKER_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A broker outage must not cancel a run in flight: the database is the record, and the
# run's lease keeps it single-driver whatever the broker redelivers later.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = config.HARNESS_QUEUE
# A message whose worker vanished is redelivered after this long; the beat's lease
# sweep usually recovers the run sooner.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": config.HARNESS_VISIBILITY_TIMEOUT}
CELERY_BEAT_SCHEDULE = {
    "expire-approvals": {"task": "approvals.expire", "schedule": config.HARNESS_BEAT_EXPIRE_SECONDS},
    "sweep-leases": {"task": "runs.sweep_leases", "schedule": config.HARNESS_BEAT_SWEEP_SECONDS},
    "sweep-containers": {"task": "sandbox.sweep", "schedule": config.HARNESS_BEAT_CONTAINERS_SECONDS},
    "notifications-sweep": {"task": "notifications.sweep", "schedule": config.HARNESS_BEAT_NOTIFY_SECONDS},
    "mail-reminders": {"task": "notifications.remind", "schedule": config.HARNESS_BEAT_REMIND_SECONDS},
    "artifact-retention": {"task": "runs.delete_expired_artifacts", "schedule": config.HARNESS_BEAT_RETENTION_SECONDS},
    "evalset-remote-retention": {"task": "trials.delete_expired_remotes", "schedule": config.HARNESS_BEAT_RETENTION_SECONDS},
    "ledger-head": {"task": "ledger.publish_head", "schedule": config.HARNESS_BEAT_LEDGER_HEAD_SECONDS},
}
HARNESS_LEASE_SECONDS = config.HARNESS_LEASE_SECONDS
HARNESS_VERIFY_FOLD = config.HARNESS_VERIFY_FOLD
HARNESS_WORKER_HOST = config.HARNESS_WORKER_HOST
HARNESS_DISK_RESERVE_MB = config.HARNESS_DISK_RESERVE_MB
HARNESS_CHECK_OUTPUT_MAX_MB = config.HARNESS_CHECK_OUTPUT_MAX_MB
HARNESS_EGRESS_MAX_EVENTS_PER_CALL = config.HARNESS_EGRESS_MAX_EVENTS_PER_CALL
HARNESS_RUN_ARTIFACTS_MAX_MB = config.HARNESS_RUN_ARTIFACTS_MAX_MB
HARNESS_KILL_POLL_SECONDS = config.HARNESS_KILL_POLL_SECONDS
HARNESS_AGENT_CALL_WAIT_SECONDS = config.HARNESS_AGENT_CALL_WAIT_SECONDS
# A run's outside agent (runs.agents.launch): where its container's relay leads (the
# web server as workers reach it), its image, and the "any" preset's command and image.
HARNESS_AGENT_GATEWAY_URL = config.HARNESS_AGENT_GATEWAY_URL
HARNESS_AGENT_IMAGE = config.HARNESS_AGENT_IMAGE
HARNESS_AGENT_ANY_COMMAND = config.HARNESS_AGENT_ANY_COMMAND
HARNESS_AGENT_ANY_IMAGE = config.HARNESS_AGENT_ANY_IMAGE
HARNESS_REVIEW_DIFF_MAX_BYTES = config.HARNESS_REVIEW_DIFF_MAX_BYTES
HARNESS_REVIEW_DIFF_MAX_LINES = config.HARNESS_REVIEW_DIFF_MAX_LINES

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
HARNESS_ARTIFACT_STORE = config.HARNESS_ARTIFACT_STORE
SPOOL_DIR = config.HARNESS_SPOOL_DIR
HARNESS_ARTIFACT_RETENTION_DAYS = config.HARNESS_ARTIFACT_RETENTION_DAYS
# The decision ledger's head, published on the beat (ledger.publish), and how long it
# keeps what deciders were shown (docs/design.md, Decision ledger).
HARNESS_LEDGER_HEAD_DESTINATION = config.HARNESS_LEDGER_HEAD_DESTINATION
HARNESS_LEDGER_CONTENT_RETENTION_DAYS = config.HARNESS_LEDGER_CONTENT_RETENTION_DAYS
STORAGES: dict[str, dict[str, object]] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
if HARNESS_ARTIFACT_STORE == "s3":
    # django-storages' S3 backend (boto3). Without keys, boto3's own chain (instance
    # role, AWS_* variables, ~/.aws) supplies the credentials.
    from harness_site.bucket import s3_storage

    STORAGES["artifacts"] = s3_storage(
        bucket=config.HARNESS_S3_BUCKET,
        prefix=config.HARNESS_S3_PREFIX,
        endpoint_url=config.HARNESS_S3_ENDPOINT_URL or None,
        region=config.HARNESS_S3_REGION or None,
        access_key=config.HARNESS_S3_ACCESS_KEY_ID or None,
        secret_key=config.HARNESS_S3_SECRET_ACCESS_KEY.get_secret_value() or None,
        addressing_style=config.HARNESS_S3_ADDRESSING_STYLE,
    )

HARNESS_RETRY_BASE_SECONDS = config.HARNESS_RETRY_BASE_SECONDS

DOCKER_HOST = config.DOCKER_HOST
SANDBOX_IMAGE = config.HARNESS_SANDBOX_IMAGE
# Container limits (memory, CPUs, pids) come from the run's policy, edited in the admin.
# The scope labels this installation's containers, so its sweeper never removes
# another installation's (or test session's) containers on the same engine.
SANDBOX_SCOPE = config.HARNESS_SANDBOX_SCOPE
# How long one attempt waits for an engine that does not answer (the run's deadline
# may end the wait sooner); then the attempt fails and the harness's retries go on.
SANDBOX_ENGINE_WAIT_SECONDS = config.HARNESS_SANDBOX_ENGINE_WAIT_SECONDS
# Containers started ahead of the runs that will take them (sandbox/container/pool.py),
# per worker process and sandbox spec; their workspaces move in under WORKSPACE_ROOT.
SANDBOX_POOL_SIZE = config.HARNESS_SANDBOX_POOL_SIZE
WORKSPACE_ROOT = config.HARNESS_WORKSPACE_ROOT
# Where contracts may take their workspace from (local paths, git repositories and
# archives); anything else is refused, so starting a run cannot read server files.
WORKSPACE_SOURCES = config.HARNESS_WORKSPACE_SOURCES
# Git remotes a run may clone from and publish to: URL prefixes ending in "/" or exact
# repository URLs, compared part by part (sandbox/vcs/allowlist.py, docs/deploy.md); none
# by default. The token or SSH key is read by the worker's git process only.
GIT_ALLOWED_REMOTES = config.HARNESS_GIT_ALLOWED_REMOTES
# Where the projects' MCP servers may be (docs/design.md, Outside tools): URL prefixes
# ending in "/" or exact endpoint URLs, compared part by part as the git remotes are;
# none by default. A server's token is read from the variable its row names.
MCP_ALLOWED_URLS = config.HARNESS_MCP_ALLOWED_URLS
GIT_TOKEN = config.HARNESS_GIT_TOKEN.get_secret_value()
GIT_TOKEN_FILE = config.HARNESS_GIT_TOKEN_FILE
GIT_TOKEN_USER = config.HARNESS_GIT_TOKEN_USER
GIT_SSH_KEY_FILE = config.HARNESS_GIT_SSH_KEY_FILE
GIT_SSH_KNOWN_HOSTS = config.HARNESS_GIT_SSH_KNOWN_HOSTS
GIT_AUTHOR = config.HARNESS_GIT_AUTHOR
GIT_TIMEOUT_SECONDS = config.HARNESS_GIT_TIMEOUT_SECONDS
# A clone that fails for a passing network reason is tried this many times in all,
# waiting 1s, 2s, 4s... (at most HARNESS_GIT_CLONE_BACKOFF_MAX_SECONDS) in between.
GIT_CLONE_ATTEMPTS = config.HARNESS_GIT_CLONE_ATTEMPTS
GIT_CLONE_BACKOFF_SECONDS = config.HARNESS_GIT_CLONE_BACKOFF_SECONDS
GIT_CLONE_BACKOFF_MAX_SECONDS = config.HARNESS_GIT_CLONE_BACKOFF_MAX_SECONDS
# The forge open_change_request opens pull requests (GitHub) or merge requests
# (GitLab) on; none by default. Its project is HARNESS_FORGE_PROJECT or the path of
# the run's remote. The token is read by the worker's forge client only.
FORGE = config.HARNESS_FORGE
# GitHub's REST root (GitHub Enterprise: https://host/api/v3); GitLab's instance URL.
FORGE_API_URL = config.HARNESS_FORGE_API_URL
# Links on the run page go only to pages under this URL.
FORGE_WEB_URL = config.HARNESS_FORGE_WEB_URL
FORGE_PROJECT = config.HARNESS_FORGE_PROJECT or None
FORGE_TOKEN = config.HARNESS_FORGE_TOKEN.get_secret_value()
FORGE_TOKEN_FILE = config.HARNESS_FORGE_TOKEN_FILE
FORGE_TIMEOUT_SECONDS = config.HARNESS_FORGE_TIMEOUT_SECONDS

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": config.LOG_LEVEL},
}

# ---------------------------------------------------------------------------------
# Model adapters (adapters; issue 6). API keys come from here only: never from a
# run's configuration, and never stored in run state, events or proposer snapshots.
# ---------------------------------------------------------------------------------
OPENAI_API_KEY = config.OPENAI_API_KEY.get_secret_value()
OPENAI_BASE_URL = config.OPENAI_BASE_URL
ANTHROPIC_API_KEY = config.ANTHROPIC_API_KEY.get_secret_value()
ANTHROPIC_BASE_URL = config.ANTHROPIC_BASE_URL
# Gemini is reached by the model proxy only (gateway/model_proxy.py): an external agent's
# traffic, with this key instead of the run's token.
GEMINI_API_KEY = config.GEMINI_API_KEY.get_secret_value()
GEMINI_BASE_URL = config.GEMINI_BASE_URL
HARNESS_MODEL_PROXY_MAX_REQUEST_MB = config.HARNESS_MODEL_PROXY_MAX_REQUEST_MB
# A run may pick another base URL (vLLM, Ollama, llama.cpp server...) only from these
# lists: the server's API key is sent to whatever URL a run names.
OPENAI_ALLOWED_BASE_URLS = sorted({OPENAI_BASE_URL, *config.HARNESS_OPENAI_ALLOWED_BASE_URLS})
ANTHROPIC_ALLOWED_BASE_URLS = sorted({ANTHROPIC_BASE_URL, *config.HARNESS_ANTHROPIC_ALLOWED_BASE_URLS})
HARNESS_OPENAI_OUTPUT_LIMIT = config.HARNESS_OPENAI_OUTPUT_LIMIT

HARNESS_MODEL_MAX_TOKENS = config.HARNESS_MODEL_MAX_TOKENS
HARNESS_MODEL_MAX_COST_USD = config.HARNESS_MODEL_MAX_COST_USD
HARNESS_MODEL_MAX_OUTPUT_TOKENS = config.HARNESS_MODEL_MAX_OUTPUT_TOKENS
HARNESS_MODEL_TIMEOUT_SECONDS = config.HARNESS_MODEL_TIMEOUT_SECONDS
HARNESS_MODEL_MAX_RETRIES = config.HARNESS_MODEL_MAX_RETRIES
HARNESS_MODEL_RETRY_BASE_SECONDS = config.HARNESS_MODEL_RETRY_BASE_SECONDS
HARNESS_MODEL_RETRY_MAX_SECONDS = config.HARNESS_MODEL_RETRY_MAX_SECONDS
HARNESS_MODEL_MAX_RESULT_CHARS = config.HARNESS_MODEL_MAX_RESULT_CHARS

HARNESS_MODEL_PRICES = config.HARNESS_MODEL_PRICES

# Values that must never be stored in events or shown on pages (API keys and the
# like); redaction also catches common credential shapes without being told.
HARNESS_SECRET_VALUES = sorted(
    {value for name, value in os.environ.items() if any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))}
    | {key for key in (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY) if key}
)

# ---------------------------------------------------------------------------------
# Web dashboard (issue 5): static files, sign-in, cookies, Content-Security-Policy.
# ---------------------------------------------------------------------------------
STATICFILES_DIRS = [BASE_DIR / "static"]
HARNESS_SERVE_STATIC = config.HARNESS_SERVE_STATIC
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
SESSION_COOKIE_AGE = config.HARNESS_SESSION_SECONDS
# Every form is server-rendered with its token, so no script needs the CSRF cookie.
CSRF_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = config.HARNESS_SECURE_COOKIES
# Once a browser has seen the site over HTTPS it refuses plain HTTP for a year (sent
# only on HTTPS responses; behind a TLS proxy set HARNESS_BEHIND_TLS_PROXY=1 so Django
# knows a request came over HTTPS).
SECURE_HSTS_SECONDS = config.HARNESS_HSTS_SECONDS
SECURE_HSTS_INCLUDE_SUBDOMAINS = config.HARNESS_HSTS_INCLUDE_SUBDOMAINS
if config.HARNESS_BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
HARNESS_TRACE_WINDOW = config.HARNESS_TRACE_WINDOW
HARNESS_TRACE_RECHECK_SECONDS = config.HARNESS_TRACE_RECHECK_SECONDS
HARNESS_LIVE_HEARTBEAT_SECONDS = config.HARNESS_LIVE_HEARTBEAT_SECONDS

# ---------------------------------------------------------------------------------
# REST API and webhook notifications (api/, notifications/; issue 7).
# ---------------------------------------------------------------------------------
# API tokens are kept hashed (api.models.ApiToken) and last this many days.
# Whether a policy may let whoever starts a run approve its requests alone. The
# deployment decides, not an admin (docs/design.md, Approvals): off, no policy
# version can turn it on, and versions saved earlier with it on have no effect.
HARNESS_ALLOW_SELF_APPROVAL = config.HARNESS_ALLOW_SELF_APPROVAL
HARNESS_API_TOKEN_DAYS = config.HARNESS_API_TOKEN_DAYS

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
HARNESS_PUBLIC_URL = config.HARNESS_PUBLIC_URL.rstrip("/")
HARNESS_WEBHOOK_TIMEOUT_SECONDS = config.HARNESS_WEBHOOK_TIMEOUT_SECONDS
HARNESS_WEBHOOK_ALLOWED_HOSTS = config.HARNESS_WEBHOOK_ALLOWED_HOSTS
HARNESS_WEBHOOK_MAX_ATTEMPTS = config.HARNESS_WEBHOOK_MAX_ATTEMPTS
HARNESS_WEBHOOK_RETRY_BASE_SECONDS = config.HARNESS_WEBHOOK_RETRY_BASE_SECONDS
HARNESS_WEBHOOK_RETRY_MAX_SECONDS = config.HARNESS_WEBHOOK_RETRY_MAX_SECONDS
# Email to reviewers and requesters (notifications/mail.py) through an SMTP relay.
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = config.HARNESS_SMTP_HOST
EMAIL_PORT = config.HARNESS_SMTP_PORT
EMAIL_HOST_USER = config.HARNESS_SMTP_USER
EMAIL_HOST_PASSWORD = config.HARNESS_SMTP_PASSWORD_FILE.get_secret_value()
EMAIL_USE_TLS = config.HARNESS_SMTP_SECURITY == "starttls"
EMAIL_USE_SSL = config.HARNESS_SMTP_SECURITY == "tls"
EMAIL_TIMEOUT = config.HARNESS_SMTP_TIMEOUT_SECONDS
DEFAULT_FROM_EMAIL = config.HARNESS_MAIL_FROM
HARNESS_MAIL_ENABLED = config.HARNESS_MAIL
HARNESS_MAIL_CATCHER_URL = config.HARNESS_MAIL_CATCHER_URL
HARNESS_MAIL_DIGEST_SECONDS = config.HARNESS_MAIL_DIGEST_SECONDS
HARNESS_MAIL_REMIND_BEFORE_SECONDS = config.HARNESS_MAIL_REMIND_BEFORE_SECONDS
HARNESS_MAIL_MAX_ATTEMPTS = config.HARNESS_MAIL_MAX_ATTEMPTS
HARNESS_MAIL_RETRY_BASE_SECONDS = config.HARNESS_MAIL_RETRY_BASE_SECONDS
HARNESS_MAIL_RETRY_MAX_SECONDS = config.HARNESS_MAIL_RETRY_MAX_SECONDS
# Deliveries go to their own queue when set, so a slow receiver never delays runs.
CELERY_TASK_ROUTES = {"notifications.*": {"queue": config.HARNESS_NOTIFY_QUEUE}}

PROMETHEUS_MULTIPROC_DIR = config.PROMETHEUS_MULTIPROC_DIR
PROMETHEUS_MULTIPROC_DIR.mkdir(parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(PROMETHEUS_MULTIPROC_DIR)
HARNESS_METRICS_ENABLED = config.HARNESS_METRICS_ENABLED
# Who may read /metrics: a bearer token (Authorization: Bearer <token>), or a client
# address in one of these networks. Empty token: only the networks.
HARNESS_METRICS_TOKEN = config.HARNESS_METRICS_TOKEN.get_secret_value()
HARNESS_METRICS_NETWORKS = config.HARNESS_METRICS_NETWORKS
HARNESS_WORKER_METRICS_PORT = config.HARNESS_WORKER_METRICS_PORT
HARNESS_WORKER_METRICS_ADDRESS = config.HARNESS_WORKER_METRICS_ADDRESS
HARNESS_TRACES_URL = config.HARNESS_TRACES_URL
HARNESS_TRACES_SERVICE_NAME = config.HARNESS_TRACES_SERVICE_NAME
HARNESS_TRACES_TIMEOUT_SECONDS = config.HARNESS_TRACES_TIMEOUT_SECONDS
HARNESS_TRACES_DELAY_MS = config.HARNESS_TRACES_DELAY_MS
