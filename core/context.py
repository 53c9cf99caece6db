"""The run being driven: its state, the ports it acts through and what it has recorded
since its last checkpoint, as one plain object every gate and the loop are handed;
and the stop that ends it from wherever a guard finds a reason to."""

from __future__ import annotations

from dataclasses import dataclass, field

from core import events as ev
from core.decisions import Stop
from core.policy import Policy
from core.ports import (
    ApprovalGate,
    ArtifactStore,
    Clock,
    Controls,
    Executor,
    NoControls,
    PolicySource,
    Proposer,
    SaysWhoKilled,
    Store,
    SystemClock,
    Workspace,
)
from core.state import RunState
from core.tools import Registry


@dataclass(frozen=True)
class HarnessConfig:
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0


@dataclass(eq=False)
class RunContext:
    state: RunState
    registry: Registry
    policy: Policy  # the policy the gates decide under; the loop adopts each new version
    proposer: Proposer
    executor: Executor
    workspace: Workspace
    approvals: ApprovalGate
    store: Store
    artifacts: ArtifactStore
    clock: Clock = field(default_factory=SystemClock)
    controls: Controls = field(default_factory=NoControls)
    config: HarnessConfig = field(default_factory=HarnessConfig)
    policies: PolicySource | None = None
    # The recorder's: the events since the last checkpoint, stored with the next one.
    unsaved: list[ev.Event] = field(default_factory=list, init=False)
    # How long the wait in progress when the run was picked up had lasted: its
    # wait_ended event says so, and adds it to the time waited (once: it is spent then).
    wait_just_ended: float = field(default=0.0, init=False)


class StopRun(Exception):
    """The run stops, from wherever it was: raised by a guard, and by the loop acting on a
    ``Stop``; the loop records it (``core.recording.stop``)."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.message)
        self.stop = stop


def no_retry(reason: str, message: str, infrastructure: str | None) -> Stop:
    """The stop when a transient failure cannot be retried: when the sandbox's own
    infrastructure kept failing, the outcome names it rather than the limit that
    ended the retries (the call itself never failed)."""
    if infrastructure is None:
        return Stop(reason, message)
    return Stop("sandbox_unavailable", f"the sandbox kept failing ({infrastructure}); {message}")


def killed(controls: Controls, where: str) -> Stop | None:
    """The stop a kill asks for, saying who asked and where it found the run; None
    without one. ``guard`` checks it; so does a proposer that waits long (an outside
    agent's next call: runs.agents.proposer), wording the stop the same."""
    if not controls.kill_requested():
        return None
    who = controls.killed_by() if isinstance(controls, SaysWhoKilled) else ""
    return Stop("killed", f"{who}; stopped {where}" if who else f"stopped by the kill switch {where}")


def guard(run: RunContext, where: str, infrastructure: str | None = None) -> None:
    """The kill switch and the deadline, checked wherever the run could go on."""
    stop = killed(run.controls, where)
    if stop is not None:
        raise StopRun(stop)
    now = run.clock.now()
    # A wait in progress is not working time (core.waits).
    if now >= run.state.deadline_at(now):
        message = f"wall-time limit of {run.state.limits.wall_time_seconds}s reached ({where})"
        raise StopRun(no_retry("deadline", message, infrastructure))
