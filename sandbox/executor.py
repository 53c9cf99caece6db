"""``SandboxExecutor``: the core's Executor and Workspace for one run, backed by the
run's workspace directory, its Docker container and the outbox (a port: the record
of published keys is the database's, runs.persistence.outbox)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from core import events as ev
from core.effects import Plan
from core.jsonutil import JSON
from core.ports import ArtifactStore, Call, Reconciliation
from core.state import PendingEffect
from sandbox.container.engine import ENGINE_ERRORS, SandboxUnavailable, wait_for_engine
from sandbox.container.output import OutputListener
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.container.spec import DEFAULT_SCOPE, ROLE_MAIN, ContainerSpec, pinned_role
from sandbox.tools.context import Outbox, ToolContext, ToolResult, ToolSettings
from sandbox.tools.mcp import McpTools
from sandbox.tools.registry import TOOLS
from sandbox.workspace import fileops
from sandbox.workspace.run_workspace import RunWorkspace

log = logging.getLogger(__name__)
# How long one attempt waits for an engine that does not answer, at most (the run's
# deadline may end the wait sooner).
ENGINE_WAIT_SECONDS = 300.0


class SandboxExecutor:
    """``container`` is the run's container, or None to start one at the first check
    (from ``spec``; a run has none when both are None). A container that failed under
    a check is replaced by a fresh one at the next attempt; an engine that does not
    answer is waited for, and ``notify`` receives the events of that wait (and of a
    check's egress connections). ``settings`` go to the tools as they are (their
    ``ToolContext``); the rest is what the executor itself answers for: the
    containers, the kill, the live output of a call and the run's MCP tools."""

    def __init__(
        self,
        run_id: str,
        workspace: RunWorkspace,
        container: SandboxContainer | None,
        artifacts: ArtifactStore,
        outbox: Outbox,
        settings: ToolSettings,
        *,
        spec: ContainerSpec | None = None,
        scope: str = DEFAULT_SCOPE,
        engine_wait_seconds: float = ENGINE_WAIT_SECONDS,
        notify: Callable[[ev.Event], None] | None = None,
        live_output: Callable[[str], OutputListener] | None = None,
        mcp: McpTools | None = None,
    ) -> None:
        self.run_id = run_id
        # The tools of the run's MCP servers, beside the built-in ones (sandbox.tools.mcp).
        self.mcp = mcp
        if mcp is not None:
            mcp.attach = self._attach_mcp
        self.workspace = workspace
        self.container = container
        self._spec = container.spec if container is not None else spec
        self._scope = container.scope if container is not None else scope
        self._engine_wait_seconds = engine_wait_seconds
        self._notify = notify
        self._lock = threading.Lock()
        self._extra: list[SandboxContainer] = []
        self._killed = False
        self._starting: threading.Thread | None = None
        self._started_early: SandboxContainer | None = None
        self._start_lock = threading.Lock()
        # Set by a kill: ends a wait for the engine at once.
        self._wake = threading.Event()
        self.context = ToolContext(
            run_id=run_id,
            workspace=workspace,
            artifacts=artifacts,
            outbox=outbox,
            settings=settings,
            container_for=self._container_for,
            live_output=live_output,
            cancelled=lambda: self._killed,
            notify=lambda cls, call_id, fields: self._tell(cls, call_id, **fields),
        )

    # -- Workspace ----------------------------------------------------------------

    def revision(self) -> str:
        return self.workspace.revision()

    def verify(self) -> str:
        return self.workspace.verify()

    def picked_up(self) -> str:
        return self.workspace.picked_up()

    def preview(self, tool: str, args: Mapping[str, JSON]) -> str | None:
        entry = TOOLS.get(tool)
        return entry.preview(self.context, args) if entry is not None and entry.preview is not None else None

    def sources(self, tool: str, args: Mapping[str, JSON]) -> Mapping[str, str]:
        entry = TOOLS.get(tool)
        return entry.sources(self.context, args) if entry is not None and entry.sources is not None else {}

    def plan(self, tool: str, args: Mapping[str, JSON], idempotency_key: str, at: float) -> Plan | None:
        entry = TOOLS.get(tool)
        if entry is None and self.mcp is not None and self.mcp.handles(tool):
            return self.mcp.plan(tool, args, idempotency_key)
        return entry.plan(self.context, args, idempotency_key, at) if entry is not None and entry.plan is not None else None

    # -- Executor -----------------------------------------------------------------

    def execute(self, call: Call) -> object:
        entry = TOOLS.get(call.tool)
        if self._killed:
            result = ToolResult("transient", "none", {"error": "the sandbox was killed"})
        elif entry is None and self.mcp is not None and self.mcp.handles(call.tool):
            result = self.mcp.run(call)
        elif entry is None:
            result = ToolResult("ok", "none", {"error": f"the sandbox has no tool {call.tool!r}"})
        else:
            try:
                result = entry.run(self.context, call)
            except fileops.FileRefused as exc:
                result = ToolResult("ok", "none", {"error": str(exc)})
        return {
            "call_id": call.call_id,
            "tool": call.tool,
            "status": result.status,
            "effect": result.effect,
            "revision": self.workspace.revision(),
            "data": result.data,
            "artifacts": result.artifacts,
        }

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        if effect.kind == "external":
            entry = TOOLS.get(effect.tool)
            if entry is None and self.mcp is not None:
                return self.mcp.reconcile(effect)
            if entry is None or entry.reconcile is None:
                return Reconciliation(False, None, False, f"the sandbox cannot look up an effect of {effect.tool!r}")
            return entry.reconcile(self.context, effect)
        # A workspace effect: stop anything still running so the revision the
        # harness re-reads next is final.
        self.wait_for_start()
        if self.container is not None and self.container.lost is None and not self._killed:
            self.container.kill_processes()
        return Reconciliation(True, True, True, "workspace re-read after stopping leftover sandbox processes")

    # -- containers ----------------------------------------------------------------

    def start_container(self) -> None:
        """Start the run's container in the background, so that its start overlaps
        what a worker does before the run's first check (the pickup's full walk of the
        workspace, where it walks; the model's first turn). Nothing runs in it until a
        check; the workspace is mounted read-only, so not even what a reused container
        had left running (killed by the start) can change the tree being verified. A start that fails leaves the
        first check to start one, waiting for the engine as it does."""
        if self._spec is None or self.container is not None or self._starting is not None:
            return
        # A pooled container is taken here, before the pickup reads the workspace: taking
        # it moves the workspace's entries (sandbox.container.pool). The start in the
        # background, which overlaps that read, never does.
        self.container = SandboxContainer.from_pool(self.run_id, self.workspace.dir, self._spec, scope=self._scope)
        if self.container is not None:
            return
        self._starting = threading.Thread(target=self._start_early, args=(self._spec,), name=f"sandbox-start-{self.run_id}", daemon=True)
        self._starting.start()

    def _start_early(self, spec: ContainerSpec) -> None:
        try:
            self._started_early = SandboxContainer.start(self.run_id, self.workspace.dir, spec, scope=self._scope, pooled=False)
        except SandboxUnavailable as exc:
            log.warning("run %s: no sandbox container yet (%s)", self.run_id, exc.reason)
        except Exception:  # the first check starts one and meets the failure itself
            log.exception("run %s: the sandbox container did not start", self.run_id)

    def wait_for_start(self) -> None:
        """Wait for a start in the background to end; its container becomes the run's."""
        thread = self._starting
        if thread is None:
            return
        thread.join()
        with self._start_lock:
            if self._starting is thread:
                self._starting = None
                if self.container is None:
                    self.container = self._started_early

    def _attach_mcp(self, argv: list[str]) -> Any:
        """An MCP server over stdio, started in the run's main container: the same
        limits, user, read-only root and no network as its checks. A container lost
        meanwhile is replaced by the next check, not here (the call would be unsent)."""
        self.wait_for_start()
        with self._lock:
            container = self.container
        if container is None or container.lost is not None:
            raise SandboxUnavailable("the run's sandbox container is not running")
        return container.attach(argv)

    def _container_for(self, call: Call) -> SandboxContainer:
        if self._spec is None:
            raise SandboxUnavailable("this run has no sandbox container")
        self.wait_for_start()
        check = call.check
        with self._lock:
            if check is None or check.image is None or check.image == self._spec.image:
                if self.container is None or self.container.lost is not None:
                    self.container = self._fresh(ROLE_MAIN, self._spec, self.container, call)
                return self.container
            # A check pinned to another image gets its own container, with the same
            # limits and the same workspace, for the rest of the run: the run's all the
            # same (its run label), in a role of its own.
            for index, extra in enumerate(self._extra):
                if extra.spec.image == check.image:
                    if extra.lost is not None:
                        self._extra[index] = extra = self._fresh(extra.role, extra.spec, extra, call)
                    return extra
            spec = dataclasses.replace(self._spec, image=check.image)
            extra = self._fresh(pinned_role(check.image), spec, None, call)
            self._extra.append(extra)
            return extra

    def _fresh(self, role: str, spec: ContainerSpec, failed: SandboxContainer | None, call: Call) -> SandboxContainer:
        """A container for the attempt in place of one that failed (or none yet). An
        engine that does not answer is waited for, until the run's deadline or the
        wait limit, whichever comes first, or a kill."""
        if failed is not None:
            log.warning("sandbox %s: replacing the container (%s)", failed.id[:12], failed.lost)
            # starting the fresh one removes it, or the sweeper does
            with contextlib.suppress(*ENGINE_ERRORS):
                failed.remove()
        until = time.time() + self._engine_wait_seconds
        if call.deadline is not None:
            until = min(until, call.deadline)
        waited_since: float | None = None
        try:
            while True:
                if self._killed:
                    raise SandboxUnavailable("the sandbox was killed")
                try:
                    container = SandboxContainer.start(self.run_id, self.workspace.dir, spec, role=role, scope=self._scope)
                except SandboxUnavailable as exc:
                    if not exc.engine_down or time.time() >= until:
                        raise
                    if waited_since is None:
                        waited_since = time.time()
                        log.warning("sandbox for run %s: waiting for the engine (%s)", self.run_id, exc.reason)
                        self._tell(ev.SandboxWaiting, call.call_id, reason=exc.reason, until=until)
                    if not wait_for_engine(until, self._wake):
                        raise
                    self._wake.wait(0.2)  # an engine that answers pings but fails requests is not hammered
                    continue
                if waited_since is not None:
                    waited = round(time.time() - waited_since, 2)
                    self._tell(ev.SandboxWaitOver, call.call_id, engine_back=True, waited_seconds=waited, detail="")
                return container
        except SandboxUnavailable as exc:
            if waited_since is not None:
                waited = round(time.time() - waited_since, 2)
                self._tell(ev.SandboxWaitOver, call.call_id, engine_back=False, waited_seconds=waited, detail=exc.reason)
            raise

    def _tell(self, cls: type[ev.Event], call_id: str, **fields: JSON) -> None:
        if self._notify is None:
            return
        try:
            self._notify(cls(run_id=self.run_id, seq=0, ts=time.time(), call_id=call_id, **fields))
        except Exception as exc:  # noqa: BLE001 - what the wait (or a connection) shows must not fail the attempt; its receipt is the record
            log.warning("run %s: could not record %s (%s)", self.run_id, cls.__name__, exc)

    def kill(self) -> None:
        """The kill switch, from any thread: ends the execution in flight (or a wait
        for the engine) and removes the run's containers."""
        self._killed = True
        self._wake.set()
        self.wait_for_start()
        for container in [self.container, *self._extra]:
            if container is None:
                continue
            try:
                container.kill()
            except ENGINE_ERRORS as exc:  # the switch must reach every container; the sweeper removes this one later
                log.warning("sandbox %s: kill failed (%s)", container.id[:12], exc)
            except Exception:
                log.exception("sandbox %s: kill failed", container.id[:12])

    def close(self) -> None:
        """The run ended: remove its containers (the workspace stays for inspection).
        An engine that cannot do it now leaves them to the sweeper."""
        self.wait_for_start()
        for container in [self.container, *self._extra]:
            if container is None:
                continue
            try:
                container.remove()
            except ENGINE_ERRORS as exc:
                log.warning("sandbox %s: not removed now (%s); the sweeper removes it later", container.id[:12], exc)
