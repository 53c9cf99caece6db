"""Server policy and its evaluation: which tools a run may call, which need a human,
what the checks run, and the upper bounds on every contract."""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.contract import Limits
from core.errors import InputError, described, problems_from
from core.jsonutil import JSON

Decision = Literal["allow", "deny", "ask"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reviewers(_Frozen):
    """Who decides a call a rule asks for: ``count`` distinct people must grant (the
    run's starter never counts), each a reviewer of the run's project and, when any
    are named, one of ``users`` or a member of one of ``groups``."""

    count: int = Field(default=1, ge=1, le=10)
    users: list[Annotated[str, Field(min_length=1, max_length=150)]] = Field(default_factory=list, max_length=50)
    groups: list[Annotated[str, Field(min_length=1, max_length=150)]] = Field(default_factory=list, max_length=50)


class Rule(_Frozen):
    name: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, description="tool name or glob")
    decision: Decision
    # Argument constraints: the rule matches only when each named argument's string
    # value matches one of the globs (e.g. {"path": ["docs/*"]}).
    when: dict[str, list[str]] = Field(default_factory=dict)
    requires_evidence: bool = False
    # For an ``ask`` rule: who decides, and how many must grant.
    reviewers: Reviewers = Field(default_factory=Reviewers)
    # The rule matches only this version of the tool (an MCP tool's version is a digest
    # of its server and schema, core.mcp): a tool whose schema changed is not matched.
    version: str | None = Field(
        default=None,
        max_length=64,
        pattern=described(r"^[A-Za-z0-9._-]+$", "a tool's version as its approval page shows it: letters, digits, '.', '_' or '-'"),
    )

    @field_validator("when")
    @classmethod
    def _globs_present(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for arg, globs in value.items():
            if not globs:
                raise ValueError(f"argument constraint {arg!r} needs at least one glob")
        return value

    def matches(self, tool: str, args: Mapping[str, JSON], version: str | None = None) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        if self.version is not None and self.version != version:
            return False
        for arg, globs in self.when.items():
            value = args.get(arg)
            if not isinstance(value, str):
                return False
            if not any(fnmatch.fnmatchcase(value, g) for g in globs):
                return False
        return True


class Destination(_Frozen):
    """A place a check may reach through the egress proxy (sandbox/egress/proxy.py): a host
    by name and one port. Names only: the proxy refuses raw addresses, so a policy
    naming one could never be used."""

    host: str = Field(
        max_length=253,
        pattern=described(
            r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$",
            "a host name in lowercase letters, digits, '-' and '.' (for example pypi.internal)",
        ),
    )
    port: int = Field(ge=1, le=65535)

    @field_validator("host")
    @classmethod
    def _a_name(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return value
        raise ValueError(f"{value} is an address; name the host (the proxy refuses raw addresses)")

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class CheckDef(_Frozen):
    """A verification command from trusted configuration; never from the model."""

    check_id: str = Field(
        pattern=described(
            r"^[a-z0-9][a-z0-9_.-]{0,63}$", "1 to 64 lowercase letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    )
    command: list[str] = Field(min_length=1)
    version: str = "1"
    timeout_seconds: int = Field(default=120, ge=1, le=3600)
    image: str | None = None
    # The workspace is read-only to checks; one that must write into its tree runs
    # in a throwaway copy of it in scratch instead.
    on_copy: bool = False
    # Where the check may connect, through the proxy Harness runs, and nowhere else;
    # empty (the default): the check has no network at all.
    egress: list[Destination] = Field(default_factory=list, max_length=50)

    def allows(self, host: str, port: int) -> bool:
        return any(d.host == host and d.port == port for d in self.egress)


class SandboxLimits(_Frozen):
    memory: str = Field(default="512m", pattern=described(r"^[0-9]+[kmg]$", "a number followed by k, m or g (for example 512m or 2g)"))
    cpus: float = Field(default=1.0, gt=0, le=64)
    pids_limit: int = Field(default=128, ge=16, le=4096)
    network: Literal["none"] = "none"
    # How large the workspace may grow before no check runs in it (a directory on
    # the worker's disk; checks see it read-only, the file tools write it).
    workspace_max_mb: int = Field(default=1024, ge=1, le=1_048_576)
    # The tmpfs checks write to (caches, bytecode, build output), emptied before and
    # after every check; the kernel bounds it, and it counts against ``memory``.
    scratch_mb: int = Field(default=256, ge=1, le=65_536)
    # The container runtime: runc (the engine's default) or gVisor's runsc, which
    # puts a user-space kernel between checks and the host's.
    runtime: Literal["runc", "runsc"] = "runc"


class AllowedSecret(_Frozen):
    """A known false positive of the publish's secret scan: this fingerprint in this
    file is not a secret (a test fixture's made-up key, say)."""

    path: str = Field(min_length=1, max_length=1000)
    fingerprint: str = Field(pattern=described(r"^[0-9a-f]{16}$", "16 lowercase hex digits, as a finding shows it"))
    reason: str = Field(default="", max_length=500)


class PublishChecks(_Frozen):
    """What the checks of a publish's change mean (core.publish_gate)."""

    # A secret found in the change: the publish is refused (the model is told the file
    # and line, to take it out), or a reviewer must grant it having seen the findings.
    secrets: Literal["refuse", "ask"] = "refuse"
    allowed_secrets: list[AllowedSecret] = Field(default_factory=list, max_length=500)
    # The remote's base branch moved since the run started: the reviewer is told
    # ("show"), or a grant made before the move cannot be used ("stale").
    moved_base: Literal["show", "stale"] = "show"
    # Added lines holding characters that hide or reorder text (core.visible): the
    # reviewer is shown them marked and named above the diff ("show"), or the publish
    # is refused as a secret finding is, the model told each file and line ("refuse").
    hidden_characters: Literal["show", "refuse"] = "show"


class Policy(_Frozen):
    version: int = Field(ge=1)
    rules: list[Rule]
    checks: list[CheckDef]
    budget: Limits
    approval_ttl_seconds: int = Field(default=3600, ge=1)
    # An optional bound on the total time one run may wait for reviewers; each request
    # expires no later than what is left of it.
    max_wait_seconds: int | None = Field(default=None, ge=1, le=30 * 24 * 3600)
    allow_self_approval: bool = False
    # Whether a run's trace (monitoring.spans) carries its calls' arguments and results,
    # masked and clipped; without it a trace names tools, rules and decisions only.
    trace_values: bool = False
    sandbox: SandboxLimits = SandboxLimits()
    publish_checks: PublishChecks = PublishChecks()
    # MCP tools (globs of ``<server>.<tool>``) the policy takes as having no effect;
    # every other MCP tool is an external effect, whatever its server's annotations
    # claim (docs/design.md, Outside tools).
    read_only_tools: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(default_factory=list, max_length=200)

    @field_validator("checks")
    @classmethod
    def _unique_checks(cls, value: list[CheckDef]) -> list[CheckDef]:
        ids = [c.check_id for c in value]
        if len(ids) != len(set(ids)):
            raise ValueError("check ids must be unique")
        return value

    def check(self, check_id: str) -> CheckDef | None:
        return next((c for c in self.checks if c.check_id == check_id), None)

    @property
    def check_ids(self) -> set[str]:
        return {c.check_id for c in self.checks}


def check_policy(raw: object) -> Policy:
    try:
        return Policy.model_validate(raw)
    except ValidationError as exc:
        raise InputError("policy", problems_from(exc)) from None


@dataclass(frozen=True)
class Authorization:
    decision: Decision
    rule: str
    requires_evidence: bool
    reviewers: Reviewers = Reviewers()


DEFAULT_DENY = "default: no rule matched"


def authorize(policy: Policy, tool: str, args: Mapping[str, JSON], version: str | None = None) -> Authorization:
    """First matching rule wins; a tool no rule mentions is denied."""
    for rule in policy.rules:
        if rule.matches(tool, args, version):
            return Authorization(rule.decision, rule.name, rule.requires_evidence, rule.reviewers)
    return Authorization("deny", DEFAULT_DENY, False)
