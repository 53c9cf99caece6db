"""Every environment variable the deployment sets, as one typed model: its type, its
default and what it does. ``harness_site.settings`` reads it once (``load``) and makes
Django's settings of it; a bad value stops the process at start, naming the variable.

The table of settings in docs/deploy.md is printed from this model:

    python3 -m harness_site.config            # the table
    python3 -m harness_site.config --write    # the table, written into docs/deploy.md
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import shlex
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self, get_args, get_origin

import annotated_types
from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, ValidationError, ValidationInfo, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.pricing import parse_price_table
from sandbox.public import UnsafeURL, allowlist

BASE_DIR = Path(__file__).resolve().parent.parent
DEPLOY_MD = BASE_DIR / "docs" / "deploy.md"
TABLE_START = "<!-- settings table: printed by `python3 -m harness_site.config`; `--write` puts it here -->"
TABLE_END = "<!-- end of the settings table -->"


class SettingError(Exception):
    """A setting from the environment is missing or malformed."""


class Named(ValueError):
    """A problem whose message names its variables itself."""


@dataclass(frozen=True)
class Shown:
    """How the settings table names a kind of value, and writes one as it would be
    set in the environment."""

    kind: str
    write: Callable[[Any], str] = str


# Each reader takes a variable's text (stripped, never empty) and passes anything else
# on as it is: the defaults are validated too, and they are typed already.


def _boolean(value: object) -> object:
    if not isinstance(value, str):
        return value
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"must be a boolean (true/false/1/0/yes/no), got {value!r}")


def _integer(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"must be an integer, got {value!r}") from None


def _number(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"must be a number, got {value!r}") from None


def _split(value: str) -> list[str]:
    items = [item.strip() for item in value.split(",")]
    if any(item == "" for item in items):
        raise ValueError(f"must be a comma-separated list without empty items, got {value!r}")
    return items


def _items(value: object) -> object:
    return _split(value) if isinstance(value, str) else value


def _command(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return shlex.split(value)
    except ValueError as error:
        raise ValueError(f"must be a command line in shell words; {error}") from None


def _agent_gateway(value: str) -> str:
    if not value:
        return value
    if not re.fullmatch(r"http://[A-Za-z0-9_.:\[\]-]+(:[0-9]{1,5})?/?", value):
        raise ValueError(f"must be http://host[:port] (plain HTTP, no path), got {value!r}")
    return value.rstrip("/")


def _networks(value: object) -> object:
    if not isinstance(value, str):
        return value
    networks = []
    for item in _split(value):
        try:
            networks.append(ipaddress.ip_network(item, strict=True))
        except ValueError as error:
            raise ValueError(f"must list networks such as 10.0.0.0/8 or ::1; {item!r}: {error}") from None
    return networks


def _url(*schemes: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        scheme, sep, rest = value.partition("://")
        # Empty is a URL setting's "none" (its default); the environment never gives it.
        if value and (not sep or scheme not in schemes or not rest):
            allowed = ", ".join(f"{s}://" for s in schemes)
            raise ValueError(f"must be a URL starting with one of {allowed}; got {value!r}")
        return value

    return check


def _identity(value: object) -> object:
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"([^<>\n]+?)\s*<([^<>\s]+@[^<>\s]+)>", value)
    if match is None:
        raise ValueError(f"must look like 'Name <email@host>', got {value!r}")
    return match.group(1), match.group(2)


def _secret_file(value: object) -> object:
    """The secret in the file the variable names (a mounted secret), its trailing
    newline removed."""
    if not isinstance(value, str):
        return value
    try:
        with open(value, encoding="utf-8") as file:
            secret = file.read().strip()
    except OSError as exc:
        raise ValueError(f"names {value!r}, which cannot be read: {exc.strerror}") from None
    if not secret:
        raise ValueError(f"names {value!r}, which is empty")
    return SecretStr(secret)


def _prices(value: object) -> dict[str, dict[str, float]]:
    try:
        table = parse_price_table(value)
    except ValueError as exc:
        raise ValueError(f"is not a price table: {exc}") from None
    return {model: {"input": price.input_per_mtok, "output": price.output_per_mtok} for model, price in table.items()}


def _allowlist(entries: list[str], info: ValidationInfo) -> list[str]:
    try:
        allowlist(entries, setting=str(info.field_name))
    except UnsafeURL as exc:
        raise Named(str(exc)) from None
    return entries


def _host_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}", value):
        raise ValueError(f"must be 1-100 letters, digits, '.', '_', ':' or '-', got {value!r}")
    return value


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


Bool = Annotated[bool, BeforeValidator(_boolean), Shown("boolean", lambda v: "true" if v else "false")]
Int = Annotated[int, BeforeValidator(_integer), Shown("integer")]
Number = Annotated[float, BeforeValidator(_number), Shown("number", _number_text)]
Text = Annotated[str, Shown("text")]
Secret = Annotated[SecretStr, Shown("secret")]
SecretFile = Annotated[SecretStr, BeforeValidator(_secret_file), Shown("path of a file holding a secret")]
FileName = Annotated[str | None, Shown("path")]
Directory = Annotated[Path, Shown("path")]
Names = Annotated[list[str], BeforeValidator(_items), Shown("comma-separated list", ",".join)]
Allowlist = Annotated[list[str], BeforeValidator(_items), AfterValidator(_allowlist), Shown("comma-separated URLs", ",".join)]
Directories = Annotated[list[Path], BeforeValidator(_items), Shown("comma-separated paths", lambda v: ",".join(map(str, v)))]
Networks = Annotated[
    list[ipaddress.IPv4Network | ipaddress.IPv6Network],
    BeforeValidator(_networks),
    Shown("comma-separated networks (CIDR)", lambda v: ",".join(map(str, v))),
]
HttpUrl = Annotated[str, AfterValidator(_url("http", "https")), Shown("`http(s)://` URL")]
Command = Annotated[list[str], BeforeValidator(_command), Shown("command line (shell words)", shlex.join)]
GatewayUrl = Annotated[str, AfterValidator(_agent_gateway), Shown("`http://host:port`")]
RedisUrl = Annotated[str, AfterValidator(_url("redis", "rediss")), Shown("`redis://` or `rediss://` URL")]
DatabaseUrl = Annotated[str, AfterValidator(_url("sqlite", "postgres", "postgresql")), Shown("`postgres://` or `sqlite://` URL")]
Identity = Annotated[tuple[str, str], BeforeValidator(_identity), Shown("`Name <email>`", lambda v: f"{v[0]} <{v[1]}>")]
Prices = Annotated[dict[str, dict[str, float]], BeforeValidator(_prices), Shown("JSON object")]
HostName = Annotated[str, AfterValidator(_host_name), Shown("name (letters, digits, `.`, `_`, `:`, `-`)")]


def shown(text: str) -> dict[str, Any]:
    """The default as the settings table writes it, for one the model computes (from
    other settings or this machine), one under this checkout, or one too long to print."""
    return {"shown_default": text}


DEV_SECRET_KEY = "dev-only-not-secret-harness-key-change-me"  # noqa: S105 - used only with DEBUG on
FORGES = {"github": ("https://api.github.com", "https://github.com"), "gitlab": ("https://gitlab.com", "https://gitlab.com")}
# List prices when written; override in production.
DEFAULT_MODEL_PRICES = """{
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


class Settings(BaseSettings):
    """The deployment's settings, one field per environment variable, named as the
    variable. A field whose default depends on another comes after it."""

    # Names as written (DEBUG, not debug); a list is comma-separated text, not JSON.
    model_config = SettingsConfigDict(case_sensitive=True, enable_decoding=False)

    # The site
    HARNESS_VAR_DIR: Directory = Field(
        BASE_DIR / "var",
        description="Where a process keeps its files unless their own setting says otherwise: the SQLite database, "
        "collected static files, workspaces, the spool and the metrics.",
        json_schema_extra=shown("`var` in the checkout"),
    )
    DEBUG: Bool = Field(
        False,
        description="Development mode: Django's debug pages, a fixed secret key, static files served by the web server, "
        "cookies without Secure and no HSTS; never on in production.",
    )
    SECRET_KEY: Secret = Field(
        default_factory=lambda data: SecretStr(DEV_SECRET_KEY if data["DEBUG"] else ""),
        description="Django's signing key (sessions, CSRF tokens): at least 32 characters, the same on every host; "
        "required when `DEBUG` is off.",
        json_schema_extra=shown("(none; a development key when `DEBUG` is on)"),
    )
    ALLOWED_HOSTS: Names = Field(
        ["localhost", "127.0.0.1", "[::1]"], description="The host names the web service answers to (Django's `ALLOWED_HOSTS`)."
    )
    CSRF_TRUSTED_ORIGINS: Names = Field(
        ["http://localhost:8000", "http://127.0.0.1:8000"],
        description="Origins (scheme, host and port) whose forms and live sockets are accepted, such as the public URL behind a proxy.",
    )
    HARNESS_PUBLIC_URL: HttpUrl = Field(
        "http://localhost:8000",
        description="The address people reach the web service at: links in mails and notifications point there.",
    )
    LOG_LEVEL: Literal["CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET"] = Field(
        "WARNING", description="The level of the log every process writes to its standard error."
    )
    HARNESS_SERVE_STATIC: Bool = Field(
        default_factory=lambda data: data["DEBUG"],
        description="The web server (Daphne) serves the static files itself; off when a front server does.",
        json_schema_extra=shown("`DEBUG`'s value"),
    )

    # Sign-in and sessions
    HARNESS_PASSWORD_SIGNIN: Bool = Field(
        True,
        description="Local passwords on the sign-in page and the admin's; off leaves only the identity provider, "
        "so `HARNESS_OIDC_ISSUER` must be set.",
    )
    HARNESS_OIDC_ISSUER: HttpUrl = Field(
        "",
        description="The OpenID provider's issuer URL, exactly as its discovery document names it; empty: no sign-in with a provider.",
    )
    HARNESS_OIDC_NAME: Text = Field(
        "your company account", description='What the sign-in button calls the provider\'s account ("Sign in with ...").'
    )
    HARNESS_OIDC_CLIENT_ID: Text = Field("", description="Harness's client id at the provider; required with `HARNESS_OIDC_ISSUER`.")
    HARNESS_OIDC_CLIENT_SECRET_FILE: SecretFile = Field(
        SecretStr(""),
        description="The file holding the client secret, read at start; required with `HARNESS_OIDC_ISSUER`.",
    )
    HARNESS_OIDC_SCOPES: Names = Field(["openid", "email", "profile"], description="The scopes asked of the provider.")
    HARNESS_OIDC_SIGN_ALGO: Literal["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256"] = Field(
        "RS256", description="The algorithm the provider signs ID tokens with."
    )
    HARNESS_OIDC_GROUPS_CLAIM: Text = Field(
        "groups", description="The claim (in the ID token or from userinfo) that lists a person's groups."
    )
    HARNESS_OIDC_USERNAME_CLAIM: Text = Field(
        "preferred_username", description="The claim that gives a new person their Harness username (else their email, else `sub`)."
    )
    HARNESS_OIDC_ALLOWED_GROUPS: Names = Field(
        [],
        description="The provider groups whose members may sign in; empty: everyone the provider signs in, with no "
        "role until a group mapping gives one.",
    )
    HARNESS_OIDC_AUTHORIZATION_ENDPOINT: HttpUrl = Field(
        "", description="The provider's authorization endpoint; empty: from its discovery document."
    )
    HARNESS_OIDC_TOKEN_ENDPOINT: HttpUrl = Field("", description="The provider's token endpoint; empty: from its discovery document.")
    HARNESS_OIDC_USERINFO_ENDPOINT: HttpUrl = Field("", description="The provider's userinfo endpoint; empty: from its discovery document.")
    HARNESS_OIDC_JWKS_ENDPOINT: HttpUrl = Field(
        "", description="The URL of the provider's signing keys (JWKS); empty: from its discovery document."
    )
    HARNESS_OIDC_TIMEOUT_SECONDS: Number = Field(10.0, ge=0.5, description="The timeout of each request to the provider.")
    HARNESS_SIGNIN_MAX_FAILURES: Int = Field(
        5, ge=1, description="Failed sign-ins allowed per username and address within the window; more are refused."
    )
    HARNESS_SIGNIN_WINDOW_SECONDS: Int = Field(900, ge=1, description="The window failed sign-ins are counted in.")
    HARNESS_SIGNIN_MAX_FAILURES_PER_USER: Int = Field(
        default_factory=lambda data: 4 * data["HARNESS_SIGNIN_MAX_FAILURES"],
        ge=1,
        description="Failed sign-ins allowed per username from any address within the window (one account guessed from many addresses).",
        json_schema_extra=shown("4 × `HARNESS_SIGNIN_MAX_FAILURES`"),
    )
    HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS: Int = Field(
        default_factory=lambda data: 10 * data["HARNESS_SIGNIN_MAX_FAILURES"],
        ge=1,
        description="Failed sign-ins allowed per address for any username within the window (one address trying many accounts).",
        json_schema_extra=shown("10 × `HARNESS_SIGNIN_MAX_FAILURES`"),
    )
    HARNESS_SESSION_SECONDS: Int = Field(12 * 3600, ge=300, description="How long a sign-in lasts.")
    HARNESS_SECURE_COOKIES: Bool = Field(
        default_factory=lambda data: not data["DEBUG"],
        description="The session and CSRF cookies are sent over HTTPS only.",
        json_schema_extra=shown("`true` unless `DEBUG` is on"),
    )
    HARNESS_HSTS_SECONDS: Int = Field(
        default_factory=lambda data: 0 if data["DEBUG"] else 365 * 24 * 3600,
        ge=0,
        description="How long a browser that has seen the site over HTTPS refuses plain HTTP for it "
        "(Strict-Transport-Security, sent on HTTPS responses only); 0: no such header.",
        json_schema_extra=shown("`31536000` (a year); `0` when `DEBUG` is on"),
    )
    HARNESS_HSTS_INCLUDE_SUBDOMAINS: Bool = Field(False, description="The Strict-Transport-Security header covers subdomains too.")
    HARNESS_BEHIND_TLS_PROXY: Bool = Field(
        False,
        description="A proxy that terminates TLS is in front: its `X-Forwarded-Proto: https` header tells Django a "
        "request came over HTTPS.",
    )
    HARNESS_API_TOKEN_DAYS: Int = Field(30, ge=1, le=3650, description="How many days an API token lasts.")
    HARNESS_ALLOW_SELF_APPROVAL: Bool = Field(
        False,
        description="A policy may let whoever starts a run approve its requests alone; off, no policy version can "
        "turn that on, and versions saved with it on have no effect.",
    )

    # The database, Redis and Celery
    DATABASE_URL: DatabaseUrl = Field(
        default_factory=lambda data: f"sqlite:///{data['HARNESS_VAR_DIR'] / 'harness.sqlite3'}",
        description="The database: PostgreSQL in production, a SQLite file for a try on one machine.",
        json_schema_extra=shown("`harness.sqlite3` under `HARNESS_VAR_DIR` (SQLite)"),
    )
    HARNESS_DB_PREPARE: Bool = Field(
        True,
        description="A run's checkpoints use prepared statements on PostgreSQL; off behind a connection pooler that "
        "cannot keep them (PgBouncer in transaction mode before 1.21, or without `max_prepared_statements`).",
    )
    REDIS_URL: RedisUrl = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis: the live pages' channel layer, the shared cache (sign-in counts) and, unless "
        "`CELERY_BROKER_URL` is set, the Celery broker.",
    )
    HARNESS_CHANNEL_PREFIX: Text = Field("harness", description="The prefix of this installation's live-event channels in Redis.")
    HARNESS_CACHE_PREFIX: Text = Field("harness", description="The prefix of this installation's cache keys in Redis.")
    CELERY_BROKER_URL: RedisUrl = Field(
        default_factory=lambda data: data["REDIS_URL"],
        description="The Celery broker the web service, workers and beat send tasks through.",
        json_schema_extra=shown("`REDIS_URL`"),
    )
    HARNESS_QUEUE: Text = Field(
        "harness", description="The Celery queue of the runs' tasks; every process of an installation names the same one."
    )
    HARNESS_NOTIFY_QUEUE: Text = Field(
        default_factory=lambda data: data["HARNESS_QUEUE"],
        description="The Celery queue of webhook deliveries and mails, so a slow receiver never delays runs.",
        json_schema_extra=shown("`HARNESS_QUEUE`"),
    )
    HARNESS_VISIBILITY_TIMEOUT: Int = Field(
        300,
        ge=10,
        description="Seconds after which a task whose worker vanished is delivered again (the beat's lease sweep "
        "usually recovers the run sooner).",
    )
    HARNESS_BEAT_EXPIRE_SECONDS: Number = Field(10.0, ge=1, description="How often the beat expires approval requests past their deadline.")
    HARNESS_BEAT_SWEEP_SECONDS: Number = Field(
        5.0, ge=1, description="How often the beat sends runs whose lease ran out to another worker."
    )
    HARNESS_BEAT_CONTAINERS_SECONDS: Number = Field(
        60.0, ge=1, description="How often the beat removes sandbox containers whose run ended or is no longer driven."
    )
    HARNESS_BEAT_NOTIFY_SECONDS: Number = Field(
        30.0, ge=1, description="How often the beat sends again the webhook deliveries whose task was lost."
    )
    HARNESS_BEAT_REMIND_SECONDS: Number = Field(
        60.0, ge=1, description="How often the beat looks for reminders due and mails whose task was lost."
    )
    HARNESS_BEAT_RETENTION_SECONDS: Number = Field(
        3600.0,
        ge=1,
        description="How often the beat deletes the artifacts (and the evaluation set's remotes) past `HARNESS_ARTIFACT_RETENTION_DAYS`.",
    )
    HARNESS_BEAT_LEDGER_HEAD_SECONDS: Number = Field(
        3600.0,
        ge=1,
        description="How often the beat publishes the decision ledger's head to `HARNESS_LEDGER_HEAD_DESTINATION` "
        "(and forgets the content past `HARNESS_LEDGER_CONTENT_RETENTION_DAYS`).",
    )

    # Runs and the workers that drive them
    HARNESS_LEASE_SECONDS: Int = Field(
        30,
        ge=2,
        description="How long a worker's claim on a run lasts without renewal; the driving worker renews it several "
        "times per period, so only a dead worker's lease runs out.",
    )
    HARNESS_WORKER_HOST: HostName = Field(
        default_factory=lambda: socket.gethostname() or "localhost",
        description="This worker's host: the runs it prepares keep their workspace on its disk and resume there "
        "while its heartbeat lasts; workers that share a disk may share a name, two hosts never.",
        json_schema_extra=shown("the machine's host name"),
    )
    HARNESS_VERIFY_FOLD: Bool = Field(
        False,
        description="Every checkpoint also compares the stored state with the fold of the run's stored log, reading "
        "the whole log each time (the test suite's setting).",
    )
    HARNESS_RETRY_BASE_SECONDS: Number = Field(
        0.5,
        ge=0.0,
        description="The wait before a tool call that failed for a passing reason is tried again; each later wait doubles.",
    )
    HARNESS_KILL_POLL_SECONDS: Number = Field(
        0.25, ge=0.05, description="How often the driving worker looks at the kill switch while a run's step runs."
    )
    HARNESS_AGENT_CALL_WAIT_SECONDS: Number = Field(
        50.0,
        ge=1.0,
        le=3600.0,
        description="How long an outside agent's MCP call waits for its answer (a reviewer's decision) before it is told "
        '"still waiting; call again with the same arguments" (the call stays one request); keep it below the agents\' '
        "own timeouts.",
    )
    HARNESS_AGENT_GATEWAY_URL: GatewayUrl = Field(
        "http://127.0.0.1:8000",
        description="The web server (its MCP endpoint and model proxy, `/agent/runs/...`) as the workers reach it, plain HTTP: "
        "a run's agent container has no network but a relay to its worker's egress proxy, which forwards only to this "
        "address and only the run's own paths.",
    )
    HARNESS_AGENT_IMAGE: Text = Field(
        "harness-agent:latest",
        description="The image a run's agent container is made from (Claude Code, Codex and Gemini CLI; "
        "built by `bash sandbox/agent/image/build.sh`).",
    )
    HARNESS_AGENT_ANY_COMMAND: Command = Field(
        [],
        description='The command of the "any" agent preset, run in the agent container with the run\'s MCP URL, token, '
        "model, prompt and model base URLs in its environment (docs/agents-protocols.md); empty: the preset is not offered.",
    )
    HARNESS_AGENT_ANY_IMAGE: Text = Field("", description='The image of the "any" agent preset\'s container; empty: `HARNESS_AGENT_IMAGE`.')
    HARNESS_DISK_RESERVE_MB: Int = Field(
        1024, ge=0, description="Free space (MB) a worker keeps on its disk: below it, checks are refused or stopped."
    )
    HARNESS_CHECK_OUTPUT_MAX_MB: Int = Field(
        8, ge=1, le=4096, description="The most output (MB) one check stores; the rest is counted, not kept."
    )
    HARNESS_RUN_ARTIFACTS_MAX_MB: Int = Field(
        512, ge=1, description="The most (MB) one run's artifacts may hold together; past it the run runs no more checks."
    )
    HARNESS_EGRESS_MAX_EVENTS_PER_CALL: Int = Field(
        200,
        ge=1,
        le=100_000,
        description="How many `egress_connection` events one check call records; the connections past it are "
        "counted in one `egress_connections_omitted` event.",
    )
    HARNESS_REVIEW_DIFF_MAX_BYTES: Int = Field(
        2_000_000,
        ge=1000,
        description="The most of a publish's diff (bytes) a reviewer is shown; a larger one lists what is too large "
        "to show and cannot be granted as it is.",
    )
    HARNESS_REVIEW_DIFF_MAX_LINES: Int = Field(
        100_000, ge=100, description="The most lines of a publish's diff a reviewer is shown, as for the bytes."
    )
    HARNESS_TRACE_WINDOW: Int = Field(
        200, ge=20, le=2000, description="How many of a run's latest events its page shows before older ones are asked for."
    )
    HARNESS_TRACE_RECHECK_SECONDS: Number = Field(
        5.0,
        ge=0.1,
        description="How long a web process's live feed waits without a doorbell before it reads the database anyway.",
    )
    HARNESS_LIVE_HEARTBEAT_SECONDS: Number = Field(
        5.0,
        ge=0.1,
        description="The longest a live socket stays silent, so a page can tell a quiet run from a dead connection.",
    )

    # Artifacts
    HARNESS_ARTIFACT_STORE: Literal["database", "s3"] = Field(
        "database",
        description="Where artifacts' bytes are kept: `database` (PostgreSQL, or SQLite on one machine) or `s3` (an S3-compatible bucket).",
    )
    HARNESS_SPOOL_DIR: Directory = Field(
        default_factory=lambda data: data["HARNESS_VAR_DIR"] / "spool",
        description="Where a worker keeps a check's output while the check runs (its own disk), before the artifact store takes it.",
        json_schema_extra=shown("`spool` under `HARNESS_VAR_DIR`"),
    )
    HARNESS_ARTIFACT_RETENTION_DAYS: Int = Field(
        0,
        ge=0,
        description="The beat deletes the artifacts of runs that ended more than this many days ago, unless a newer "
        "run stored the same content, and the evaluation set's git remotes of trials that ended as long ago; 0 keeps them all.",
    )
    HARNESS_LEDGER_HEAD_DESTINATION: Text = Field(
        "log",
        description="Where the beat publishes the decision ledger's head (the last entry's seq and digest), so that "
        "a truncated or rewritten chain is found by `ledger verify --head`: `log` (a line in the beat's log), "
        "`file:<path>` (a JSON line appended, best a file another account owns and this one may only append to), "
        "an `http://` or `https://` URL (the JSON POSTed, a webhook), or `off`.",
    )
    HARNESS_LEDGER_CONTENT_RETENTION_DAYS: Int = Field(
        0,
        ge=0,
        description="The beat forgets what the decision ledger kept of what each decider was shown (diffs, arguments, "
        "evidence) once no entry newer than this many days names it; the entries and their digests stay, so the "
        "chain still verifies. 0 keeps it all.",
    )
    HARNESS_S3_BUCKET: Text = Field("", description="The bucket, required with `HARNESS_ARTIFACT_STORE=s3`; Harness creates no bucket.")
    HARNESS_S3_PREFIX: Text = Field(
        "artifacts", description="The prefix of the artifacts' keys, so one bucket can hold several installations."
    )
    HARNESS_S3_ENDPOINT_URL: HttpUrl = Field(
        "", description="The URL of another S3-compatible service (MinIO, Ceph, a cloud's own); empty: AWS."
    )
    HARNESS_S3_REGION: Text = Field("", description="The bucket's region; empty: boto3's.")
    HARNESS_S3_ACCESS_KEY_ID: Text = Field(
        "",
        description="The bucket's access key, set with `HARNESS_S3_SECRET_ACCESS_KEY` or not at all; without them, "
        "boto3's own chain (an instance role, `AWS_*` variables, `~/.aws`).",
    )
    HARNESS_S3_SECRET_ACCESS_KEY: Secret = Field(SecretStr(""), description="The secret of `HARNESS_S3_ACCESS_KEY_ID`.")
    HARNESS_S3_ADDRESSING_STYLE: Literal["auto", "path", "virtual"] = Field(
        "auto", description="How the bucket is named in its URLs: `path` for services without virtual-host buckets."
    )

    # The sandbox and workspaces
    DOCKER_HOST: Text = Field(
        "unix:///var/run/docker.sock", description="The Docker engine that runs the sandbox containers (Docker's own variable)."
    )
    HARNESS_SANDBOX_IMAGE: Text = Field("harness-sandbox:latest", description="The image run containers are made from.")
    HARNESS_SANDBOX_SCOPE: Text = Field(
        "default",
        description="The label of this installation's containers, so its sweep never removes another installation's on the same engine.",
    )
    HARNESS_SANDBOX_ENGINE_WAIT_SECONDS: Number = Field(
        300.0,
        ge=1.0,
        description="How long one attempt waits for an engine that does not answer; then it fails and the run's retries go on.",
    )
    HARNESS_SANDBOX_POOL_SIZE: Int = Field(
        2,
        ge=0,
        description="How many started, locked-down containers each worker process keeps ready per sandbox spec, so a run's "
        "first command need not wait for one to start (each is handed to one run, never reused); 0: none.",
    )
    HARNESS_WORKSPACE_ROOT: Directory = Field(
        default_factory=lambda data: data["HARNESS_VAR_DIR"] / "workspaces",
        description="Where a worker keeps the workspaces of the runs it drives (its own disk).",
        json_schema_extra=shown("`workspaces` under `HARNESS_VAR_DIR`"),
    )
    HARNESS_WORKSPACE_SOURCES: Directories = Field(
        [BASE_DIR / "examples"],
        description="The directories contracts may take a workspace from (local paths and archives under them); anything else is refused.",
        json_schema_extra=shown("`examples` in the checkout"),
    )
    HARNESS_MCP_ALLOWED_URLS: Allowlist = Field(
        [],
        description="Where the projects' MCP servers may be: URL prefixes ending in `/` or exact endpoint URLs; empty: none.",
    )

    # Git remotes and forges
    HARNESS_GIT_ALLOWED_REMOTES: Allowlist = Field(
        [],
        description="The git remotes a run may clone from and publish to: URL prefixes ending in `/` or exact "
        "repository URLs, compared part by part; empty: none.",
    )
    HARNESS_GIT_TOKEN: Secret = Field(SecretStr(""), description="The token for HTTPS remotes, given to the worker's git process only.")
    HARNESS_GIT_TOKEN_FILE: FileName = Field(
        None, description="The file holding the token for HTTPS remotes, read by the worker's git process only."
    )
    HARNESS_GIT_TOKEN_USER: Text = Field("x-access-token", description="The user name given with the token to HTTPS remotes.")
    HARNESS_GIT_SSH_KEY_FILE: FileName = Field(None, description="The private key file for `ssh://` remotes.")
    HARNESS_GIT_SSH_KNOWN_HOSTS: FileName = Field(
        None, description="The known-hosts file the keys of `ssh://` remotes are checked against."
    )
    HARNESS_GIT_AUTHOR: Identity = Field(
        ("Harness", "harness@localhost"),
        description="The author and committer of the commits runs publish, fixed by the process that files the request.",
    )
    HARNESS_GIT_TIMEOUT_SECONDS: Number = Field(
        120.0, ge=1.0, description="The timeout of one git command against a remote (clone, fetch, push)."
    )
    HARNESS_GIT_CLONE_ATTEMPTS: Int = Field(
        4, ge=1, le=20, description="How many times in all a clone that fails for a passing network reason is tried."
    )
    HARNESS_GIT_CLONE_BACKOFF_SECONDS: Number = Field(
        1.0, ge=0.0, description="The wait before a clone's second attempt; each later wait doubles."
    )
    HARNESS_GIT_CLONE_BACKOFF_MAX_SECONDS: Number = Field(30.0, ge=0.0, description="The longest wait between two attempts of a clone.")
    HARNESS_FORGE: Literal["", "github", "gitlab"] = Field(
        "",
        description="The forge `open_change_request` opens pull requests (GitHub) or merge requests (GitLab) on; empty: none.",
    )
    HARNESS_FORGE_API_URL: HttpUrl = Field(
        default_factory=lambda data: FORGES.get(data["HARNESS_FORGE"], FORGES["github"])[0],
        description="GitHub's REST root (GitHub Enterprise: `https://host/api/v3`) or GitLab's instance URL.",
        json_schema_extra=shown("`https://api.github.com`; `https://gitlab.com` with `gitlab`"),
    )
    HARNESS_FORGE_WEB_URL: HttpUrl = Field(
        default_factory=lambda data: FORGES.get(data["HARNESS_FORGE"], FORGES["github"])[1],
        description="Where the forge's pages are: the run page links only to pages under this URL.",
        json_schema_extra=shown("`https://github.com`; `https://gitlab.com` with `gitlab`"),
    )
    HARNESS_FORGE_PROJECT: Text = Field(
        "", description="The forge project, `owner/repo` or `group/project`; empty: the path of the run's remote."
    )
    HARNESS_FORGE_TOKEN: Secret = Field(
        SecretStr(""),
        description="The forge token, used by the worker's forge client only; it or `HARNESS_FORGE_TOKEN_FILE` is "
        "required with `HARNESS_FORGE`.",
    )
    HARNESS_FORGE_TOKEN_FILE: FileName = Field(
        None, description="The file holding the forge token, read by the worker's forge client only."
    )
    HARNESS_FORGE_TIMEOUT_SECONDS: Number = Field(30.0, ge=1.0, description="The timeout of one request to the forge.")

    # Model providers
    OPENAI_API_KEY: Secret = Field(SecretStr(""), description="The key for OpenAI-compatible models, sent only to the allowed base URLs.")
    OPENAI_BASE_URL: HttpUrl = Field(
        "https://api.openai.com/v1", description="The OpenAI-compatible API a run uses unless it names another allowed one."
    )
    ANTHROPIC_API_KEY: Secret = Field(SecretStr(""), description="The key for Anthropic models, sent only to the allowed base URLs.")
    ANTHROPIC_BASE_URL: HttpUrl = Field(
        "https://api.anthropic.com", description="The Anthropic API a run uses unless it names another allowed one."
    )
    GEMINI_API_KEY: Secret = Field(
        SecretStr(""),
        description="The key for Google's Gemini API, sent only to `GEMINI_BASE_URL` by the model proxy (an external "
        "agent's Gemini traffic); empty: the proxy refuses Gemini requests.",
    )
    GEMINI_BASE_URL: HttpUrl = Field(
        "https://generativelanguage.googleapis.com",
        description="The Gemini API the model proxy forwards an external agent's Gemini requests to.",
    )
    HARNESS_MODEL_PROXY_MAX_REQUEST_MB: Int = Field(
        32, ge=1, le=1024, description="The largest request body an external agent may send through the model proxy."
    )
    HARNESS_OPENAI_ALLOWED_BASE_URLS: Names = Field(
        [],
        description="Other base URLs a run may name for OpenAI-compatible models (vLLM, Ollama, llama.cpp server); "
        "the server's key is sent to them.",
    )
    HARNESS_ANTHROPIC_ALLOWED_BASE_URLS: Names = Field(
        [], description="Other base URLs a run may name for Anthropic models; the server's key is sent to them."
    )
    HARNESS_OPENAI_OUTPUT_LIMIT: Literal["auto", "max_tokens", "max_completion_tokens"] = Field(
        "auto",
        description="The Chat Completions field that caps a reply: `auto` sends `max_completion_tokens` to "
        "api.openai.com and `max_tokens` elsewhere.",
    )
    HARNESS_MODEL_MAX_TOKENS: Int = Field(
        2_000_000, ge=1, description="The most model tokens a run may use; a run's own `max_tokens` is held under it."
    )
    HARNESS_MODEL_MAX_COST_USD: Number = Field(
        10.0, ge=0.0001, description="The most a run's model calls may cost (USD); a run's own `max_cost_usd` is held under it."
    )
    HARNESS_MODEL_MAX_OUTPUT_TOKENS: Int = Field(4096, ge=16, le=200_000, description="The most tokens one model reply may have.")
    HARNESS_MODEL_TIMEOUT_SECONDS: Number = Field(120.0, ge=1.0, description="The timeout of one model request.")
    HARNESS_MODEL_MAX_RETRIES: Int = Field(
        4, ge=0, le=20, description="How many times a model request that failed for a passing reason is tried again."
    )
    HARNESS_MODEL_RETRY_BASE_SECONDS: Number = Field(
        1.0,
        ge=0.0,
        description="The wait before a model request's first retry, unless the provider says how long; each later wait doubles.",
    )
    HARNESS_MODEL_RETRY_MAX_SECONDS: Number = Field(60.0, ge=0.0, description="The longest wait between two attempts of a model request.")
    HARNESS_MODEL_MAX_RESULT_CHARS: Int = Field(
        12_000, ge=1000, description="The most characters of a tool's result, or of a file in the task, the model is shown."
    )
    HARNESS_MODEL_PRICES: Prices = Field(
        default_factory=lambda: _prices(DEFAULT_MODEL_PRICES),
        description='USD per million tokens, `{"model": {"input": x, "output": y}}`; a dated variant uses its base '
        'model\'s entry, and `"*"` prices every model not listed.',
        json_schema_extra=shown("list prices of OpenAI's and Anthropic's models when written (`harness_site/config.py`)"),
    )

    # Webhooks and mail
    HARNESS_WEBHOOK_TIMEOUT_SECONDS: Number = Field(10.0, ge=0.5, description="The timeout of one webhook delivery.")
    HARNESS_WEBHOOK_ALLOWED_HOSTS: Names = Field(
        [],
        description="Host names and networks (CIDR) webhooks may reach although they are not public (a receiver on "
        "the private network); everything else must be public.",
    )
    HARNESS_WEBHOOK_MAX_ATTEMPTS: Int = Field(
        8, ge=1, le=50, description="How many times a webhook delivery is tried before it is marked failed."
    )
    HARNESS_WEBHOOK_RETRY_BASE_SECONDS: Number = Field(
        10.0, ge=0.01, description="The wait before a delivery's second attempt; attempt n waits base × 2^(n-1), capped."
    )
    HARNESS_WEBHOOK_RETRY_MAX_SECONDS: Number = Field(3600.0, ge=0.01, description="The longest wait between two attempts of a delivery.")
    HARNESS_MAIL: Bool = Field(False, description="Mail reviewers and requesters through the SMTP relay.")
    HARNESS_SMTP_HOST: Text = Field("localhost", description="The SMTP relay's host.")
    HARNESS_SMTP_PORT: Int = Field(25, ge=1, le=65535, description="The SMTP relay's port.")
    HARNESS_SMTP_USER: Text = Field("", description="The user name at the relay; empty: no login.")
    HARNESS_SMTP_PASSWORD_FILE: SecretFile = Field(SecretStr(""), description="The file holding the password at the relay, read at start.")
    HARNESS_SMTP_SECURITY: Literal["none", "starttls", "tls"] = Field(
        "starttls",
        description="`starttls` (port 587), `tls` (implicit TLS, port 465) or `none` (a relay on the same host only).",
    )
    HARNESS_SMTP_TIMEOUT_SECONDS: Int = Field(20, ge=1, description="The timeout of one connection to the relay.")
    HARNESS_MAIL_FROM: Text = Field("Harness <harness@localhost>", description="The mails' sender: an address the relay may send as.")
    HARNESS_MAIL_CATCHER_URL: Text = Field(
        "",
        description="A local mail catcher's page of what it received, which the mail settings page links to "
        "(`make up` sets it); empty: no link.",
    )
    HARNESS_MAIL_DIGEST_SECONDS: Number = Field(60.0, ge=0.0, description="Requests for one person within this window go out as one mail.")
    HARNESS_MAIL_REMIND_BEFORE_SECONDS: Number = Field(
        3600.0, ge=0.0, description="A reviewer who has not decided is reminded this long before a request expires."
    )
    HARNESS_MAIL_MAX_ATTEMPTS: Int = Field(
        8, ge=1, le=50, description="How many times a mail the relay does not take is tried before it is marked failed."
    )
    HARNESS_MAIL_RETRY_BASE_SECONDS: Number = Field(
        30.0, ge=0.01, description="The wait before a mail's second attempt; each later wait doubles."
    )
    HARNESS_MAIL_RETRY_MAX_SECONDS: Number = Field(3600.0, ge=0.01, description="The longest wait between two attempts of a mail.")

    # Metrics and traces
    PROMETHEUS_MULTIPROC_DIR: Directory = Field(
        default_factory=lambda data: data["HARNESS_VAR_DIR"] / "metrics",
        description="Where every process of the host writes its figures, which `/metrics` adds up; one directory per "
        "host, emptied when its services start anew.",
        json_schema_extra=shown("`metrics` under `HARNESS_VAR_DIR`"),
    )
    HARNESS_METRICS_ENABLED: Bool = Field(
        True,
        description="The event log's figures are counted; off, `/metrics` still has the database's gauges and the "
        "counters kept outside the log.",
    )
    HARNESS_METRICS_TOKEN: Secret = Field(
        SecretStr(""),
        description="A scraper showing `Authorization: Bearer <token>` may read `/metrics`; empty: only the networks "
        "of `HARNESS_METRICS_NETWORKS`.",
    )
    HARNESS_METRICS_NETWORKS: Networks = Field(
        [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("::1/128")],
        description="The client networks that may read `/metrics` without the token (an address alone is one host).",
    )
    HARNESS_WORKER_METRICS_PORT: Int = Field(
        0,
        ge=0,
        le=65535,
        description="The port a worker on a host without a web server serves its host's figures on; 0: it does not.",
    )
    HARNESS_WORKER_METRICS_ADDRESS: Text = Field(
        "127.0.0.1",
        description="The address a worker's figures are served on, which only the scraper should reach (it asks for no token).",
    )
    HARNESS_TRACES_URL: HttpUrl = Field(
        "", description="The collector's OTLP/HTTP traces URL (`http://collector:4318/v1/traces`); empty: no traces."
    )
    HARNESS_TRACES_SERVICE_NAME: Text = Field("harness", description="The `service.name` of the traces' resource.")
    HARNESS_TRACES_TIMEOUT_SECONDS: Number = Field(10.0, ge=0.5, description="The timeout of one export to the collector.")
    HARNESS_TRACES_DELAY_MS: Int = Field(1000, ge=10, description="How long finished spans wait to be sent together.")

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        # A variable set to nothing (`FOO=` in a compose file) means its default, as
        # an unset one does; the spaces around a value are no part of it.
        if not isinstance(data, dict):
            return data
        return {name: value.strip() if isinstance(value, str) else value for name, value in data.items() if not _blank(value)}

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """What one setting asks of another; every problem at once."""
        problems = []
        secret_key = self.SECRET_KEY.get_secret_value()
        if not self.DEBUG and not secret_key:
            problems.append("SECRET_KEY is required but not set")
        elif not self.DEBUG and len(secret_key) < 32:
            problems.append("SECRET_KEY must be at least 32 characters when DEBUG is off")
        if self.HARNESS_OIDC_ISSUER and not self.HARNESS_OIDC_CLIENT_ID:
            problems.append("HARNESS_OIDC_ISSUER is set: HARNESS_OIDC_CLIENT_ID is required but not set")
        if self.HARNESS_OIDC_ISSUER and not self.HARNESS_OIDC_CLIENT_SECRET_FILE.get_secret_value():
            problems.append("HARNESS_OIDC_ISSUER is set: HARNESS_OIDC_CLIENT_SECRET_FILE must name the client secret's file")
        if not self.HARNESS_PASSWORD_SIGNIN and not self.HARNESS_OIDC_ISSUER:
            problems.append("HARNESS_PASSWORD_SIGNIN=0 leaves no way to sign in: set HARNESS_OIDC_ISSUER too")
        if self.HARNESS_ARTIFACT_STORE == "s3" and not self.HARNESS_S3_BUCKET:
            problems.append("HARNESS_ARTIFACT_STORE is s3: HARNESS_S3_BUCKET is required but not set")
        if self.HARNESS_ARTIFACT_STORE == "s3" and bool(self.HARNESS_S3_ACCESS_KEY_ID) != bool(
            self.HARNESS_S3_SECRET_ACCESS_KEY.get_secret_value()
        ):
            problems.append("HARNESS_S3_ACCESS_KEY_ID and HARNESS_S3_SECRET_ACCESS_KEY are set together or not at all")
        if self.HARNESS_FORGE and not (self.HARNESS_FORGE_TOKEN.get_secret_value() or self.HARNESS_FORGE_TOKEN_FILE):
            problems.append("HARNESS_FORGE is set: HARNESS_FORGE_TOKEN or HARNESS_FORGE_TOKEN_FILE is required")
        if problems:
            raise Named("\n".join(problems))
        return self


def _blank(value: object) -> bool:
    return isinstance(value, str) and not value.strip()


def load() -> Settings:
    """The settings from this process's environment; a bad value raises SettingError
    naming each variable that is wrong and how."""
    try:
        return Settings()
    except ValidationError as error:
        # A default computed from a setting that failed is not computed: that one is named.
        problems = [_problem(detail) for detail in error.errors() if detail["type"] != "default_factory_not_called"]
        raise SettingError("\n".join(problems)) from None


def _problem(detail: ErrorDetails) -> str:
    context = detail.get("ctx", {})
    if isinstance(context.get("error"), Named):
        return str(context["error"])
    name = str(detail["loc"][0])
    field = Settings.model_fields[name]
    if detail["type"] == "value_error":
        return f"{name} {context['error']}"
    if detail["type"] == "greater_than_equal":
        return f"{name} must be at least {_write(field, context['ge'])}, got {detail['input']}"
    if detail["type"] == "less_than_equal":
        return f"{name} must be at most {_write(field, context['le'])}, got {detail['input']}"
    if detail["type"] == "literal_error":
        choices = ", ".join(choice or "empty" for choice in get_args(field.annotation))
        return f"{name} must be one of {choices}; got {detail['input']!r}"
    return f"{name}: {detail['msg']}"


# The table


def _shown(field: FieldInfo) -> Shown | None:
    return next((item for item in field.metadata if isinstance(item, Shown)), None)


def _write(field: FieldInfo, value: object) -> str:
    """``value`` as the variable ``field`` would be set to it."""
    what = _shown(field)
    return what.write(value) if what else str(value)


def kind(field: FieldInfo) -> str:
    """What a setting's value is, as the table says it."""
    if get_origin(field.annotation) is Literal:
        *others, last = (f"`{choice}`" if choice else "empty" for choice in get_args(field.annotation))
        return f"{', '.join(others)} or {last}"
    what = _shown(field)
    assert what is not None, f"{field} has no Shown in its type"
    low = next((item.ge for item in field.metadata if isinstance(item, annotated_types.Ge)), None)
    high = next((item.le for item in field.metadata if isinstance(item, annotated_types.Le)), None)
    if low is not None and high is not None:
        return f"{what.kind}, {_write(field, low)} to {_write(field, high)}"
    if low is not None:
        return f"{what.kind}, at least {_write(field, low)}"
    return what.kind


def default(field: FieldInfo) -> str:
    """A setting's default as the table writes it; a secret's is never printed."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "shown_default" in extra:
        return str(extra["shown_default"])
    if field.annotation is SecretStr:
        return "(none)"
    value = field.get_default(call_default_factory=False)
    if value in ("", [], None):
        return "(empty)"
    return f"`{_write(field, value)}`"


def table() -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| Variable | Type | Default | What it does |", "| --- | --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        rows.append(f"| `{name}` | {cell(kind(field))} | {cell(default(field))} | {cell(field.description or '')} |")
    return "\n".join(rows) + "\n"


def with_table(document: str) -> str:
    """``document`` (docs/deploy.md) with the table between its markers replaced."""
    before, start, rest = document.partition(TABLE_START)
    _old, end, after = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"{DEPLOY_MD} has no settings table's markers")
    return f"{before}{start}\n{table()}{end}{after}"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m harness_site.config", description="Print the table of settings.")
    parser.add_argument("--write", action="store_true", help=f"write the table into {DEPLOY_MD.relative_to(BASE_DIR)}")
    if parser.parse_args(argv).write:
        DEPLOY_MD.write_text(with_table(DEPLOY_MD.read_text()))
    else:
        sys.stdout.write(table())


if __name__ == "__main__":
    main(sys.argv[1:])
