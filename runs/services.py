"""Creating and driving runs, with their parts handed in: ``drive_run`` takes the
Environment (executor and workspace), the ApprovalGate and the controls; creating a
run takes the function that checks or prepares its workspace. Choosing the
production parts (the Docker sandbox, approvals' rows, Celery) is runs.runtime's, the
composition root; tests call these functions with their own. ``check_*`` validates
and raises InputError; the rest assume valid input."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import PolicyVersion
from approvals.policies import current_policy_row, load_policy, newest_version
from common.metrics import remember_project
from core import storable
from core.contract import Contract, check_contract
from core.environment import Environment
from core.errors import FieldProblem, InputError
from core.fences import RowLock, driver_fence
from core.loop import Harness, HarnessConfig, new_state
from core.mcp import TOOL_NAME
from core.policy import Policy
from core.ports import ApprovalGate, Clock, Controls, Proposer, Store, SystemClock
from core.report import build_report
from core.state import RunState
from core.tools import Registry, builtin_registry
from projects.models import default_project_id, mcp_server_names
from runs.budgets import project_bound
from runs.models import Run
from runs.persistence.artifacts import ArtifactStorage
from runs.persistence.decisions import remember_project as remember_ledger_project
from runs.persistence.store import DjangoStore, load_state
from runs.proposers import build_proposer, check_proposer_config


@dataclass(frozen=True)
class NewRun:
    contract: Contract
    proposer: dict[str, Any]
    policy_row: PolicyVersion
    policy: Policy


# A run's configuration (its contract and proposer, a script of proposals too) as
# UTF-8 JSON; the web's request bodies are smaller still.
MAX_CONFIG_BYTES = 32 * 2**20


def registry() -> Registry:
    return builtin_registry()


class KnownTools:
    """The tool names a new run's contract may allow: the built-in tools, and any
    ``<server>.<tool>`` of an MCP server configured for its project; whether the
    server lists that tool is found when a worker lists its tools (a tool it does not
    list is an unknown tool at the resolve gate)."""

    def __init__(self, builtin: set[str], servers: set[str]) -> None:
        self.builtin = builtin
        self.servers = servers

    def said(self) -> str:
        servers = f", or <server>.<tool> of this project's MCP servers ({', '.join(sorted(self.servers))})" if self.servers else ""
        return f"the tools are {', '.join(sorted(self.builtin))}{servers}"

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        server, dot, tool = name.partition(".")
        return name in self.builtin or (bool(dot) and server in self.servers and bool(TOOL_NAME.match(tool)))


def script_tool_problems(proposer: dict[str, Any], known: KnownTools) -> list[FieldProblem]:
    """Each scripted proposal naming a tool that does not exist here: a script is
    written ahead, so a typo is named when the run is started by a person, rather than
    found as a refusal at the resolve gate mid-run."""
    script = proposer.get("script") if proposer.get("kind") == "scripted" else None
    return [
        FieldProblem(f"proposer.script[{index}].tool", f"unknown tool {entry['tool']!r}: {known.said()}")
        for index, entry in enumerate(script or [])
        if entry["tool"] not in known
    ]


def check_new_run(
    contract_raw: object, proposer_config: object, project_id: int | None = None, *, known_script_tools: bool = False
) -> NewRun:
    """The run checked against the policy in force in its project (``project_id``,
    else the default project), under which it starts; with ``known_script_tools`` (a
    run a person starts), a scripted proposer's tools must exist too. Without it a
    script may name any tool, to drive the gates' refusals of one (tests, benchmarks)."""
    # A value no database takes would make a run that cannot be listed or driven
    # (core.storable): refused first, naming where it is, before any other check
    # reads it (a value nested thousands deep breaks those too).
    unfit = storable.problems(contract_raw, "contract", max_bytes=MAX_CONFIG_BYTES)
    unfit += storable.problems(proposer_config, "proposer", max_bytes=MAX_CONFIG_BYTES)
    if unfit:
        raise InputError("new run", unfit)
    row = current_policy_row(project_id)
    policy = load_policy(row)
    problems = []
    # Both halves are checked so one answer names every bad field.
    known = KnownTools(registry().names, mcp_server_names(row.project_id))
    try:
        contract = check_contract(contract_raw, known, policy.check_ids)
    except InputError as exc:
        problems += [FieldProblem("contract" if p.field == "(root)" else f"contract.{p.field}", p.message) for p in exc.problems]
    try:
        proposer = check_proposer_config(proposer_config)
    except InputError as exc:
        problems += exc.problems
    else:
        problems += script_tool_problems(proposer, known) if known_script_tools else []
    if problems:
        raise InputError("new run", problems)
    return NewRun(contract, proposer, row, policy)


def do_create_run(
    new: NewRun, actor: Any, revision_of: Callable[[Run], str], clock: Clock | None = None, project_id: int | None = None
) -> Run:
    """Create the run row (in ``project_id``, else the project whose policy ``new``
    was checked against) and its initial state; ``revision_of`` prepares the
    workspace for the new run and returns its revision."""
    if project_id is not None and project_id != new.policy_row.project_id:
        # A run starts under its own project's policy, never another's.
        raise ValueError(f"the run was checked under project {new.policy_row.project_id}'s policy, not project {project_id}'s")
    now = clock.now() if clock else time.time()
    # A workspace that cannot be prepared (bad source) must not leave a run row
    # without state behind.
    with transaction.atomic():
        return _create(new, actor, revision_of, now)


def _create(new: NewRun, actor: Any, revision_of: Callable[[Run], str], now: float) -> Run:
    run = Run.objects.create(
        project_id=new.policy_row.project_id,
        task_id=new.contract.task_id,
        objective=new.contract.objective,
        contract=new.contract.model_dump(mode="json"),
        policy=new.policy_row,
        proposer=new.proposer,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    revision = revision_of(run)
    state = new_state(
        run_id=str(run.id),
        contract=new.contract,
        policy=new.policy,
        actor=getattr(actor, "username", "") or "system",
        revision=revision,
        now=now,
        caps=run.project.run_limits,
    )
    # The row was inserted by this transaction: nobody else can see it, let alone drive it.
    DjangoStore(RowLock("the run's creation")).checkpoint(state, [])
    run.refresh_from_db()
    return run


def drive_run(
    run: Run,
    environment: Environment,
    approvals: ApprovalGate,
    *,
    lease_token: int | None = None,
    controls: Controls | None = None,
    clock: Clock | None = None,
    proposer: Proposer | None = None,
    store: Store | None = None,
) -> RunState:
    """Advance a run from its stored state until it waits or stops. Its gates decide
    under the policy now in force in its project (docs/design.md, Approvals), re-read
    before every proposal.
    ``proposer`` and ``store`` replace the run's own (a test's model, a crashing store)."""
    policies = CurrentPolicy(run.project_id)
    policy = policies.current()
    remember_project(str(run.pk), run.project.slug)
    # The ledger's entries of this run's decisions name its project without a read.
    remember_ledger_project(str(run.pk), run.project_id)
    state = load_state(run)
    now = (clock or SystemClock()).now()
    tools = registry().with_tools(environment.tools)
    harness = Harness(
        state,
        registry=tools,
        policy=policy,
        proposer=proposer
        or build_proposer(
            run.proposer,
            state.proposer_state,
            state.contract,
            tools.visible(state.contract.allowed_tools),
            deadline=state.deadline_at(now),
            clock=clock,
            revision=state.revision,
            repository=lambda: environment.repository(state.contract.allowed_write_paths, state.contract.allowed_tools),
            bound=lambda: project_bound(run, timezone.now()),
            run_id=str(run.pk),
            controls=controls,
            lease_token=lease_token,
        ),
        executor=environment.executor,
        workspace=environment.workspace,
        approvals=approvals,
        store=store or DjangoStore(driver_fence(lease_token)),
        artifacts=ArtifactStorage(str(run.pk)),
        clock=clock,
        controls=controls,
        config=HarnessConfig(retry_base_seconds=settings.HARNESS_RETRY_BASE_SECONDS),
        policies=policies,
    )
    return harness.run()


class CurrentPolicy:
    """The newest policy version of one project (the run's: its gates adopt that
    project's new versions, never another's); a version already loaded is not parsed
    again."""

    def __init__(self, project_id: int | None) -> None:
        self.project_id = default_project_id() if project_id is None else project_id
        self._loaded: Policy | None = None

    def current(self) -> Policy:
        version = newest_version(self.project_id)
        if self._loaded is None or self._loaded.version != version:
            self._loaded = load_policy(current_policy_row(self.project_id))
        return self._loaded


def report_of(run: Run) -> dict[str, Any]:
    """The stored final report, or the report so far for a run still going, with who
    proposed its calls (Harness's own loop or the outside agent, named) and their model
    usage: an outside agent's is on the run's log, not its state (runs.agents.usage)."""
    from runs.agent_runs import proposer_report

    run.refresh_from_db()
    state = load_state(run)
    report = dict(run.report.data) if hasattr(run, "report") else build_report(state)
    report["proposer"] = proposer_report(run, state.proposer_state)
    return report
