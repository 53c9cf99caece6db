"""``SandboxExecutor``: the core's Executor and Workspace for one run, backed by the
run's workspace directory, its Docker container and the outbox."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from runs.core.jsonutil import JSON
from runs.core.policy import CheckDef
from runs.core.ports import ArtifactStore, Call, Reconciliation
from runs.core.state import PendingEffect
from sandbox import fileops
from sandbox.container import ContainerSpec, OutputListener, SandboxContainer, SandboxUnavailable
from sandbox.quota import DiskQuota
from sandbox.tools import HANDLERS, ToolContext, ToolResult, outbox_path
from sandbox.workspace import RunWorkspace

log = logging.getLogger(__name__)


class SandboxExecutor:
    def __init__(
        self,
        run_id: str,
        workspace: RunWorkspace,
        container: SandboxContainer | None,
        artifacts: ArtifactStore,
        outbox: Path,
        *,
        spool_dir: Path | None = None,
        quota: DiskQuota = DiskQuota(),
        live_output: Callable[[str], OutputListener] | None = None,
    ) -> None:
        self.run_id = run_id
        self.workspace = workspace
        self.container = container
        self._lock = threading.Lock()
        self._extra: list[SandboxContainer] = []
        self._killed = False
        self.context = ToolContext(
            run_id=run_id,
            workspace=workspace,
            artifacts=artifacts,
            outbox=outbox,
            container_for=self._container_for,
            spool_dir=spool_dir,
            quota=quota,
            live_output=live_output,
        )

    # -- Workspace ----------------------------------------------------------------

    def revision(self) -> str:
        return self.workspace.revision()

    def preview(self, tool: str, args: Mapping[str, JSON]) -> str | None:
        return self.workspace.preview(tool, args)

    # -- Executor -----------------------------------------------------------------

    def execute(self, call: Call) -> object:
        handler = HANDLERS.get(call.tool)
        if handler is None:
            result = ToolResult("ok", "none", {"error": f"the sandbox has no tool {call.tool!r}"})
        elif self._killed:
            result = ToolResult("transient", "none", {"error": "the sandbox was killed"})
        else:
            try:
                result = handler(self.context, call)
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
            if effect.idempotency_key is None:
                return Reconciliation(False, None, False, "no idempotency key to look up")
            found = outbox_path(self.context.outbox, effect.idempotency_key).exists()
            detail = "found in the outbox" if found else "not in the outbox (the outbox is local: authoritative)"
            return Reconciliation(True, found, True, detail)
        # A workspace effect: stop anything still running so the revision the
        # harness re-reads next is final.
        if self.container is not None and not self._killed:
            self.container.kill_processes()
        return Reconciliation(True, True, True, "workspace re-read after stopping leftover sandbox processes")

    # -- containers ----------------------------------------------------------------

    def _container_for(self, check: CheckDef) -> SandboxContainer:
        if self.container is None:
            raise SandboxUnavailable("this run has no sandbox container")
        if check.image is None or check.image == self.container.spec.image:
            return self.container
        # A check pinned to another image gets its own container, with the same
        # limits and the same workspace, for the rest of the run.
        with self._lock:
            for extra in self._extra:
                if extra.spec.image == check.image:
                    return extra
            spec = ContainerSpec(
                image=check.image,
                memory=self.container.spec.memory,
                cpus=self.container.spec.cpus,
                pids_limit=self.container.spec.pids_limit,
                network=self.container.spec.network,
            )
            extra = SandboxContainer.start(f"{self.run_id}.{len(self._extra) + 1}", self.workspace.dir, spec)
            self._extra.append(extra)
            return extra

    def kill(self) -> None:
        """The kill switch, from any thread: ends the execution in flight and removes
        the run's containers."""
        self._killed = True
        for container in [self.container, *self._extra]:
            if container is None:
                continue
            try:
                container.kill()
            except Exception:  # the switch must reach every container
                log.exception("sandbox %s: kill failed", container.id[:12])

    def close(self) -> None:
        """The run ended: remove its containers (the workspace stays for inspection)."""
        for container in [self.container, *self._extra]:
            if container is not None:
                container.remove()
