"""An outside agent as a run's proposer (docs/design.md, Agents): every ``tools/call``
it makes on the run's MCP endpoint (gateway.mcp_endpoint) is the run's next proposal,
decided by the same loop and gates as a model's.

``propose(feedback)`` first answers the call whose outcome ``feedback`` is (the one it
returned last time), then waits for the run's next call and returns it. It waits in
short slices, so a kill (the run's Controls: the worker's watchdog), the run's deadline
or the agent's end are noticed within about a second; a kill stops the run ``killed``,
saying who killed it, as a guard of the loop does (core.context.killed).

Resuming: the snapshot names the request whose proposal the loop checkpointed last
(``awaiting``), and the bridge keeps a request on its queue until it is answered. A
worker that dies after taking a call and before checkpointing it leaves the older
snapshot: its successor answers the older request again (a no-op: the first answer
stands) and takes the same call from the head of the queue. A worker that dies
after the checkpoint leaves the call in the run's state: the loop finishes it
(core.pending, core.waits) and the next ``propose`` answers it. So a call is neither
lost nor proposed twice."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from core import feedback as fb
from core.context import StopRun, killed
from core.decisions import Stop
from core.jsonutil import JSON
from core.ports import Clock, Controls, NoControls, ProposerStopped, SystemClock
from core.tools import ToolSpec
from runs.agents.bridge import Bridge

log = logging.getLogger(__name__)

# The presets a run's proposer may name (runs.proposers). With ``mcp-client`` Harness
# starts nothing and the agent is any MCP client given the run's token; the others start
# the agent in a container of the run's, through ``LAUNCHERS`` (runs.agents.launch):
# Claude Code, Codex, Gemini CLI, and ``any``, the admin's own command and image
# (sandbox.agent.presets names them alike).
PRESETS = ("mcp-client", "claude-code", "codex", "gemini-cli", "any")
SLICE_SECONDS = 1.0


class AgentProcess(Protocol):
    """A started agent (the seam for the agent's container): whether it has ended."""

    def ended(self) -> str | None:
        """Why the agent ended (e.g. "exited with status 1"), or None while it runs."""

    def stop(self) -> None:
        """End the agent now (the run stopped, or the worker lets the run go)."""


@dataclass(frozen=True)
class Launch:
    """What a launcher is given to start a run's agent: the run, its proposer's
    configuration and the tools it will see (the MCP URL, the token and the model
    proxy's URLs are the launcher's to make: runs.agents.tokens.mint)."""

    run_id: str
    config: dict[str, Any]
    tools: tuple[ToolSpec, ...]
    # The lease of the worker driving the run: what the launcher writes to the run's
    # log is fenced by it (runs.persistence.eventlog), as the executor's events are.
    lease_token: int | None = None
    # The run's deadline (the clock's seconds), which bounds the agent's process too.
    deadline: float | None = None


# preset -> what starts it. Registered by runs.agents.launch (imported by ``launchers``);
# a preset with no launcher, or one whose launcher says it is not available (the ``any``
# preset without the admin's command), is refused when a run is created
# (runs.proposers.check_proposer_config).
LAUNCHERS: dict[str, Callable[[Launch], AgentProcess]] = {}


def launchers() -> dict[str, Callable[[Launch], AgentProcess]]:
    import runs.agents.launch  # noqa: F401 - registers the presets' launchers

    return LAUNCHERS


def startable(preset: str) -> bool:
    if preset == "mcp-client":
        return True
    launcher = launchers().get(preset)
    if launcher is None:
        return False
    available = getattr(launcher, "available", None)
    return bool(available()) if callable(available) else True


def wire_name(spec: ToolSpec) -> str:
    """The name an agent calls a tool by: an MCP tool's ``server.tool`` as
    ``server__tool``, as the model adapters offer it (adapters.context.ToolDef), since
    the agents' model APIs take no dot in a function's name."""
    return spec.name.replace(".", "__")


def render(feedback: fb.Feedback | None, limit: int, evidence_tools: Collection[str]) -> tuple[str, bool, str]:
    """The answer to a call, as the built-in model adapters word it (one reader of
    feedback: adapters.feedback): text, whether it is an error, the feedback's kind."""
    from adapters.feedback import render_feedback

    text, is_error = render_feedback(feedback, None, limit, evidence_tools)
    return text, is_error, feedback.kind if feedback is not None else "none"


class AgentProposer:
    def __init__(
        self,
        run_id: str,
        *,
        preset: str,
        tools: Collection[ToolSpec],
        snapshot: dict[str, Any],
        bridge: Bridge | None = None,
        controls: Controls | None = None,
        clock: Clock | None = None,
        deadline: float | None = None,
        agent: AgentProcess | None = None,
        result_chars: int = 20_000,
        budget: Callable[[], str | None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.preset = preset
        self.bridge = bridge or Bridge(run_id)
        self.controls = controls or NoControls()
        self.clock = clock or SystemClock()
        self.deadline = deadline
        self.agent = agent
        self.result_chars = result_chars
        # What the run's model budget says: None while it is not spent, else why.
        self.budget = budget
        self.evidence_tools = {spec.name for spec in tools if spec.runs_check is not None}
        # The agent calls a tool by its wire name; the gates know it by the registry's.
        self.names = {wire_name(spec): spec.name for spec in tools}
        awaiting = snapshot.get("awaiting")
        self.awaiting: str | None = awaiting if isinstance(awaiting, str) else None
        self.taken = int(snapshot.get("taken", 0) or 0)
        self._notes: list[dict[str, JSON]] = []
        # What tools/list shows: the tools as this worker made them (with the project's
        # MCP tools, which only a worker lists); the endpoint adds what the policy says.
        self.bridge.publish_tools([published(spec) for spec in tools])

    def propose(self, feedback: fb.Feedback | None) -> object | None:
        if self.awaiting is not None:
            text, is_error, kind = render(feedback, self.result_chars, self.evidence_tools)
            self.bridge.answer(self.awaiting, text, is_error, kind)
            self.awaiting = None
        while True:
            self._check_budget()
            taken = self.bridge.take()
            if taken is not None:
                # In the snapshot from the checkpoint that records this proposal on:
                # the next propose (this worker's or its successor's) answers it.
                self.awaiting = taken.request_id
                self.taken += 1
                self._notes.append({"kind": "agent_call", "agent": self.preset, "request": taken.request_id})
                return {"tool": self.names.get(taken.tool, taken.tool), "args": taken.args}
            stop = killed(self.controls, "while waiting for the agent's next call")
            if stop is not None:
                raise StopRun(stop)
            now = self.clock.now()
            if self.deadline is not None and now >= self.deadline:
                raise StopRun(Stop("deadline", "the run's wall-time limit was reached while waiting for the agent's next call"))
            if self.agent is not None:
                ended = self.agent.ended()
                if ended is not None and self.bridge.take() is None:
                    log.info("run %s: the agent ended (%s)", self.run_id, ended)
                    failure = getattr(self.agent, "failure", None)
                    said = failure() if callable(failure) else None
                    if said:
                        # An agent that never ran (no image, no engine): the run says so.
                        raise ProposerStopped("model_error", said)
                    return None
            self.bridge.wait(SLICE_SECONDS if self.deadline is None else max(0.0, min(SLICE_SECONDS, self.deadline - now)))

    def _check_budget(self) -> None:
        """A spent budget (the model proxy's record: runs.agents.usage) stops the run
        ``budget_exhausted``; the proxy already refuses the agent's next model call."""
        if self.budget is None:
            return
        spent = self.budget()
        if spent is not None:
            raise ProposerStopped("budget_exhausted", spent)

    def snapshot(self) -> dict[str, JSON]:
        return {"kind": "agent", "preset": self.preset, "awaiting": self.awaiting, "taken": self.taken}

    def refused(self) -> None:
        """Nothing of a call is kept here but its request's id."""

    def notes(self) -> list[dict[str, JSON]]:
        notes, self._notes = self._notes, []
        return notes


def published(spec: ToolSpec) -> dict[str, JSON]:
    """A tool as the endpoint lists it, before the policy's part of its description."""
    return {
        "name": wire_name(spec),
        "registry_name": spec.name,
        "version": spec.version,
        "description": spec.description,
        "schema": spec.json_schema(),
        "writes": spec.writes_workspace,
        "external": spec.external_effect,
        "needs_evidence": spec.needs_evidence,
        "runs_check": spec.runs_check is not None,
        "finishes": spec.finishes,
        "source": spec.source,
    }


def build_agent_proposer(
    run_id: str,
    config: dict[str, Any],
    snapshot: dict[str, Any],
    tools: Collection[ToolSpec],
    *,
    controls: Controls | None,
    clock: Clock | None,
    deadline: float | None,
    result_chars: int,
    lease_token: int | None = None,
) -> AgentProposer:
    preset = str(config.get("preset", "mcp-client"))
    agent = None
    launcher = launchers().get(preset) if preset != "mcp-client" else None
    if launcher is not None:
        agent = launcher(Launch(run_id, dict(config), tuple(tools), lease_token=lease_token, deadline=deadline))
    return AgentProposer(
        run_id,
        preset=preset,
        tools=tools,
        snapshot=snapshot,
        controls=controls,
        clock=clock,
        deadline=deadline,
        agent=agent,
        result_chars=result_chars,
        budget=lambda: spent_budget(run_id),
    )


def spent_budget(run_id: str) -> str | None:
    """Why the run's model budget is spent (its own, the server's, its project's), as
    the model proxy records it; None while it is not."""
    from runs.agents.usage import check
    from runs.models import Run

    # Not its state (the loop's, large): the budget reads the configuration and the project.
    run = Run.objects.select_related("project").defer("state").filter(pk=run_id).first()
    if run is None:
        return None
    _budget, spent = check(run)
    return spent.message if spent is not None else None
