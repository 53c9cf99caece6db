"""Starting a run's outside agent (issue 41; docs/design.md, Agents): the launchers of
``runs.agents.proposer.LAUNCHERS`` for Claude Code, Codex, Gemini CLI and the admin's
``any`` agent.

A launch, by the worker driving the run (under its lease):

1. mints the run's token (runs.agents.tokens; the one it had before stops working);
2. starts the run's agent container (sandbox.agent.container): the agent image, the
   run's workspace read-only, the policy's limits and runtime like the run's sandbox
   container (at least what Node and a CLI need: ``AGENT_SPEC``), no network but the
   relay to this worker's egress proxy, which forwards only the run's own paths of the
   gateway (``HARNESS_AGENT_GATEWAY_URL``: the MCP endpoint and the model proxy); a
   container left by an earlier driver of the run is removed first;
3. runs the CLI's ``--version`` in it: ``agent_started`` (preset, version, image);
4. runs the preset's command (sandbox.agent.presets) on the run's objective with a
   short preamble (its tools are Harness's, gated; ``finish`` ends the run; a resumed
   run says so), in a thread; its stdout (the JSON transcript) and stderr are captured
   bounded and stored as the run's artifacts when it ends: ``agent_ended`` (exit code,
   why, the artifacts).

Every event is written through the run's event log with the driver's lease as fence
(as the executor's ``notify`` writes a check's egress events): a worker whose lease
was taken over writes nothing more. The started agent is the worker's for as long as
it drives the run (``live``): the next drive of the same lease (after an approval
wait, runs.runtime.drive_leased) finds it again, and ``let_go`` ends it when the
worker stops driving the run (stopped, finished, lease lost): the container removed,
the token revoked.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from django.conf import settings
from django.db import connection

from approvals.policies import load_policy
from core import events as ev
from core.fences import Lease
from runs import placement
from runs.agents import tokens
from runs.agents.names import agent_name
from runs.agents.proposer import LAUNCHERS, Launch
from runs.models import Event, Run
from runs.persistence.artifacts import ArtifactStorage
from runs.persistence.eventlog import append_event
from runs.persistence.store import LeaseLost
from sandbox.public import (
    AGENT_SPEC,
    CONNECTED,
    HOME_DIR,
    AgentContainer,
    AgentResult,
    ContainerSpec,
    Gateway,
    ModelProxy,
    OutputCapture,
    Preset,
    RunEndpoints,
    launch,
    mcp_report,
    parse_version,
    version_argv,
)

log = logging.getLogger(__name__)

# The model a preset's CLI is told to use when the run's proposer names none (the
# model proxy lets the agent use only its run's models: runs.agents.usage).
DEFAULT_MODELS: dict[str, str] = {"claude-code": "claude-sonnet-4-5", "codex": "gpt-5.1-codex", "gemini-cli": "gemini-2.5-pro", "any": ""}
# Where the agent starts: the run's workspace, read-only (sandbox.container.spec).
WORKDIR = "/workspace"
VERSION_SECONDS = 60.0
# How long an agent whose run finished has to end by itself (it is told the run ended,
# answers its model once more) before its container is removed.
FINISHED_GRACE_SECONDS = 5.0
# The agent process's own time limit past the run's working time left (see ``start``).
BACKSTOP_SECONDS = 24 * 3600.0
# What is kept in memory of each stream (the artifact holds up to the output cap).
INLINE_BYTES = 4096
# How much of the transcript's start is read for the CLI's report of its MCP connection.
REPORT_BYTES = 256 * 1024
UNREACHED = "could not connect to Harness's MCP endpoint"

PREAMBLE = """You are working on a task for Harness, which runs you as this run's agent.
Your only tools are Harness's (offered to you from its "harness" MCP server): reading and
searching the workspace, writing files, applying patches, running the contract's checks,
publishing, finishing. Every call goes through the run's gates: a call may be refused
(the answer says why and what would be allowed), may wait for a reviewer's approval, or
come back with a reviewer's requested changes; act on what each answer says. Nothing
else you do can change the workspace or reach anything. When the task is done (with a
passing check where the task needs one), call `finish` with a short summary: that ends
the run."""

RESUMED = """This run was already in progress: its earlier agent stopped (its worker went
away). The workspace holds what was done so far; look before you change anything, and
do not publish again what was published (lookup_publish tells)."""


def prompt(contract: dict[str, Any], *, resumed: bool) -> str:
    """What the agent is asked: the preamble, then the run's objective and criteria."""
    parts = [PREAMBLE]
    if resumed:
        parts.append(RESUMED)
    parts.append(f"Task ({contract.get('task_id', 'task')}): {contract.get('objective', '')}")
    criteria = [str(c) for c in contract.get("acceptance_criteria") or []]
    if criteria:
        parts.append("Acceptance criteria:\n" + "\n".join(f"- {c}" for c in criteria))
    paths = [str(p) for p in contract.get("allowed_write_paths") or []]
    if paths:
        parts.append("You may write only: " + ", ".join(paths))
    return "\n\n".join(parts)


def agent_spec(run: Run, image: str) -> ContainerSpec:
    """The agent's container: the policy's limits and runtime, as the run's sandbox
    container has them, but never less than Node and a CLI need (AGENT_SPEC)."""
    limits = load_policy(run.policy).sandbox
    spec = ContainerSpec.from_limits(limits, image)
    return replace(
        spec,
        memory=_larger_memory(spec.memory, AGENT_SPEC.memory),
        pids_limit=max(spec.pids_limit, AGENT_SPEC.pids_limit),
        scratch_mb=max(spec.scratch_mb, AGENT_SPEC.scratch_mb),
    )


def _bytes(memory: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(memory[:-1]) * units[memory[-1].lower()] if memory and memory[-1].lower() in units else int(memory)


def _larger_memory(a: str, b: str) -> str:
    return a if _bytes(a) >= _bytes(b) else b


def gateway_url() -> str:
    return str(settings.HARNESS_AGENT_GATEWAY_URL)


class Recorder:
    """Writes the agent's events to the run's log under the driver's lease, from any
    thread (the relay's, the agent's); a thread other than the driver's closes its own
    database connection after each write. Nothing here may fail the agent or the run:
    a write refused (the lease taken over) or failing is logged."""

    def __init__(self, run_id: str, lease_token: int | None) -> None:
        self.run_id = run_id
        self.lease = Lease(lease_token) if lease_token is not None else None
        self.driver = threading.get_ident()
        self.lost = False

    def __call__(self, cls: type[ev.Event], fields: dict[str, Any]) -> None:
        if self.lease is None or self.lost:
            return
        try:
            append_event(self.run_id, cast(Any, cls), fence=self.lease, **fields)
        except LeaseLost:
            self.lost = True
            log.info("run %s: lease taken over; the agent's %s is not recorded", self.run_id, cls.__name__)
        except Exception as exc:  # noqa: BLE001 - a record must not fail the agent
            log.warning("run %s: could not record %s (%s)", self.run_id, cls.__name__, exc)
        finally:
            if threading.get_ident() != self.driver:
                connection.close()


class McpWatch:
    """Reads the start of the agent's transcript, as it arrives, for its CLI's report
    of the harness MCP server (sandbox.agent.presets.mcp_report), until the report
    comes or ``REPORT_BYTES`` passed; ``on_report`` gets the server's status, once."""

    def __init__(self, preset: Preset, on_report: Callable[[str], None]) -> None:
        self.preset = preset
        self.on_report = on_report
        self.pending = bytearray()
        self.read = 0
        self.done = False

    def write(self, data: bytes) -> None:
        if self.done:
            return
        self.pending += data[: REPORT_BYTES - self.read]
        self.read += len(data)
        while (end := self.pending.find(b"\n")) >= 0:
            line = bytes(self.pending[:end])
            del self.pending[: end + 1]
            status = mcp_report(self.preset, line)
            if status is not None:
                self.done = True
                self.on_report(status)
                return
        self.done = self.read >= REPORT_BYTES


@dataclass
class Ended:
    reason: Literal["exited", "killed", "deadline", "failed"]
    exit_code: int | None
    said: str


class AgentSession:
    """A started agent (``runs.agents.proposer.AgentProcess``): its container, its
    thread, its end."""

    def __init__(self, run_id: str, preset: str, lease_token: int | None, record: Recorder, token: str) -> None:
        self.run_id = run_id
        self.preset = preset
        self.lease_token = lease_token
        self.record = record
        self.token = token
        self.box: AgentContainer | None = None
        self.image = ""
        self.version = ""
        self._thread: threading.Thread | None = None
        self._ended: Ended | None = None
        self._done = threading.Event()
        self._stopping = threading.Event()
        self._why: Literal["killed", "deadline"] = "killed"
        self._lock = threading.Lock()
        # Why the agent cannot work though it runs (its MCP connection failed), once known.
        self._problem = ""

    # -- AgentProcess --------------------------------------------------------------

    def ended(self) -> str | None:
        found = self._ended
        if found is None:
            return None
        return found.said

    def failure(self) -> str | None:
        """Why the agent could not start or could not work (it never reached Harness's
        MCP endpoint), once it is known that it could not."""
        found = self._ended
        if found is None or found.reason != "failed":
            return None
        return f"the agent {found.said}" if self.version == "" or self._problem else None

    def stop(self, why: Literal["killed", "deadline"] = "killed") -> None:
        """End the agent now: its container is removed (its process with it), the
        thread writes ``agent_ended`` (``killed``, or ``deadline`` when the run's
        wall-time limit stopped it); waits for that, briefly."""
        self._why = why
        self._stopping.set()
        box = self.box
        if box is not None and not self._done.is_set():
            with contextlib.suppress(Exception):
                box.kill()
        self._done.wait(15)
        if box is not None:
            with contextlib.suppress(Exception):
                box.close()

    def wait(self, seconds: float) -> bool:
        return self._done.wait(seconds)

    # -- starting --------------------------------------------------------------------

    def start(self, run: Run, config: dict[str, Any], deadline: float | None) -> None:
        preset = cast(Preset, self.preset)
        command = [str(word) for word in settings.HARNESS_AGENT_ANY_COMMAND] if preset == "any" else []
        image = (str(settings.HARNESS_AGENT_ANY_IMAGE) if preset == "any" else "") or str(settings.HARNESS_AGENT_IMAGE)
        self.image = image
        workspace = placement.workspace_root(run) / "workspace"
        gateway = Gateway.for_run(gateway_url(), self.run_id)
        started = time.monotonic()
        try:
            self.box = AgentContainer.start(
                self.run_id, Path(workspace), gateway, self.record, spec=agent_spec(run, image), scope=settings.SANDBOX_SCOPE
            )
            said = bytearray()
            result = self.box.run(
                version_argv(preset, command=command),
                {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": HOME_DIR, "NO_COLOR": "1"},
                on_output=lambda _stream, data: said.extend(data[: 4096 - len(said)]),
                timeout_seconds=VERSION_SECONDS,
            )
            text = said.decode(errors="replace")
            self.version = parse_version(text) or (text.strip()[:100] if result.exit_code == 0 else "")
            if result.exit_code != 0 or not self.version:
                raise RuntimeError(f"`--version` gave no version (exit {result.exit_code}): {text.strip()[:300]}")
        except Exception as exc:  # noqa: BLE001 - the run goes on without an agent, saying why
            self._fail(f"could not start: {exc}", started)
            return
        self.record(ev.AgentStarted, {"preset": self.preset, "version": self.version, "image": image})
        resumed = Event.objects.filter(run_id=self.run_id, type=ev.type_name(ev.AgentStarted)).count() > 1
        local = gateway.local_url
        model = str(config.get("model") or DEFAULT_MODELS.get(self.preset, ""))
        endpoints = RunEndpoints(
            mcp_url=f"{local}/mcp/",
            token=self.token,
            proxy=ModelProxy(anthropic=f"{local}/anthropic", openai=f"{local}/openai/v1", gemini=f"{local}/gemini"),
            model=model,
            home=HOME_DIR,
            workdir=WORKDIR,
        )
        how = launch(preset, endpoints, prompt(run.contract, resumed=resumed), command=command)
        # The run's working time excludes its approval waits, which the agent lives
        # through: the loop and the proposer keep the deadline; this only bounds a
        # process nobody stops (a day past the working time left).
        left = (deadline - time.time()) if deadline is not None else float(run.contract["limits"]["wall_time_seconds"])
        timeout = max(30.0, left) + BACKSTOP_SECONDS
        self._thread = threading.Thread(
            target=self._run, args=(how.argv, how.env, how.files, timeout), name=f"agent-{self.run_id[:8]}", daemon=True
        )
        self._thread.start()

    def _fail(self, said: str, started: float) -> None:
        log.warning("run %s: the agent %s", self.run_id, said)
        self._end(Ended("failed", None, said), started, [])
        if self.box is not None:
            with contextlib.suppress(Exception):
                self.box.close()

    def _run(self, argv: tuple[str, ...], env: dict[str, str], files: dict[str, str], timeout: float) -> None:
        started = time.monotonic()
        limit = int(settings.HARNESS_CHECK_OUTPUT_MAX_MB) << 20
        spool = Path(settings.SPOOL_DIR)
        out = OutputCapture(INLINE_BYTES, spool, store_limit=limit)
        err = OutputCapture(INLINE_BYTES, spool, store_limit=limit)
        # A CLI reports its MCP connection on either stream (sandbox.agent.presets.mcp_report).
        watch = McpWatch(cast(Preset, self.preset), self._reported)
        err_watch = McpWatch(cast(Preset, self.preset), self._reported)

        def output(stream: str, data: bytes) -> None:
            if stream == "stderr":
                err.write(data)
                err_watch.write(data)
                return
            out.write(data)
            watch.write(data)

        ended = Ended("failed", None, "the agent did not run")
        try:
            assert self.box is not None
            if self._stopping.is_set():
                raise RuntimeError("stopped before it started")
            result: AgentResult = self.box.run(
                argv,
                env,
                files,
                on_output=output,
                timeout_seconds=timeout,
            )
            if self._problem:
                ended = Ended("failed", result.exit_code, self._problem)
            elif result.killed or self._stopping.is_set():
                ended = self._stopped()
            elif result.timed_out:
                ended = Ended("deadline", None, "stopped at the run's wall-time limit")
            else:
                ended = Ended("exited", result.exit_code, f"exited with status {result.exit_code}")
        except Exception as exc:  # noqa: BLE001 - recorded as the agent's end
            if self._problem:
                ended = Ended("failed", None, self._problem)
            else:
                ended = self._stopped() if self._stopping.is_set() else Ended("failed", None, f"failed while it ran: {exc}")
        finally:
            out.close()
            err.close()
            artifacts = self._store(out, err)
            self._end(ended, started, artifacts)
            if self.box is not None:
                with contextlib.suppress(Exception):
                    self.box.close()
            connection.close()

    def _reported(self, status: str) -> None:
        """The CLI reported its harness MCP server: an agent without it has no tool and
        could only talk to its model, so it is ended at once and the run told why
        (runs.agents.proposer: ``failure``), never taken for an agent that chose to stop."""
        if status == CONNECTED:
            return
        self._problem = f"{UNREACHED} ({agent_name(self.preset)} reported its MCP server harness as {status})"
        log.warning("run %s: the agent %s", self.run_id, self._problem)
        # Not on this thread, which carries the agent's output that the kill cuts.
        threading.Thread(target=self._give_up, name=f"agent-stop-{self.run_id[:8]}", daemon=True).start()

    def _give_up(self) -> None:
        self._stopping.set()
        box = self.box
        if box is not None:
            with contextlib.suppress(Exception):
                box.kill()

    def _stopped(self) -> Ended:
        if self._why == "deadline":
            return Ended("deadline", None, "stopped at the run's wall-time limit")
        return Ended("killed", None, "stopped by Harness")

    def _store(self, *captures: OutputCapture) -> list[str]:
        refs = []
        storage = ArtifactStorage(self.run_id)
        for capture in captures:
            try:
                refs.append(storage.put_file(capture.path, "text/plain"))
            except Exception as exc:  # noqa: BLE001 - the end is recorded without it
                log.warning("run %s: the agent's output was not stored (%s)", self.run_id, exc)
            finally:
                capture.path.unlink(missing_ok=True)
        return refs

    def _end(self, ended: Ended, started: float, artifacts: list[str]) -> None:
        with self._lock:
            if self._ended is not None:
                return
            self._ended = ended
        self.record(
            ev.AgentEnded,
            {
                "preset": self.preset,
                "exit_code": ended.exit_code,
                "reason": ended.reason,
                "duration_ms": int((time.monotonic() - started) * 1000),
                "artifacts": artifacts,
                "problem": ended.said if ended.reason == "failed" else "",
            },
        )
        self._done.set()


# run id -> the agent this worker process started for it (under the lease it names).
_LIVE: dict[str, AgentSession] = {}
_LIVE_LOCK = threading.Lock()


class PresetLauncher:
    """``LAUNCHERS[preset]``: the live agent of this lease if there is one, else a new one."""

    def __init__(self, preset: str) -> None:
        self.preset = preset

    def available(self) -> bool:
        return self.preset != "any" or bool(settings.HARNESS_AGENT_ANY_COMMAND)

    def __call__(self, start: Launch) -> AgentSession:
        with _LIVE_LOCK:
            found = _LIVE.get(start.run_id)
        if found is not None and found.lease_token == start.lease_token and found.preset == self.preset:
            return found
        if found is not None:
            let_go(start.run_id)
        run = Run.objects.select_related("policy").get(pk=start.run_id)
        session = AgentSession(start.run_id, self.preset, start.lease_token, Recorder(start.run_id, start.lease_token), tokens.mint(run))
        with _LIVE_LOCK:
            _LIVE[start.run_id] = session
        session.start(run, start.config, start.deadline)
        return session


def live(run_id: str) -> AgentSession | None:
    with _LIVE_LOCK:
        return _LIVE.get(run_id)


def kill(run_id: str) -> None:
    """The run was killed: its agent ends now (the Watchdog's ``on_kill``)."""
    session = live(run_id)
    if session is not None:
        session.stop()


def let_go(run_id: str, *, finished: bool = False) -> None:
    """The worker stops driving the run: its agent (if this worker started one) ends,
    given ``FINISHED_GRACE_SECONDS`` to end by itself when the run ``finished``, and
    its token stops working. Idempotent."""
    with _LIVE_LOCK:
        session = _LIVE.pop(run_id, None)
    if session is None:
        return
    outcome = Run.objects.filter(pk=run_id).values_list("outcome", flat=True).first()
    if finished:
        session.wait(FINISHED_GRACE_SECONDS)
    session.stop("deadline" if outcome == "deadline" else "killed")
    tokens.revoke(run_id, session.token)


for _preset in ("claude-code", "codex", "gemini-cli", "any"):
    LAUNCHERS[_preset] = PresetLauncher(_preset)
