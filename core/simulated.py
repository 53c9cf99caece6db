"""In-memory stand-ins for the executor, workspace, approval store, run store and
clock. They drive the self-test and the unit tests of the pure loop; the real parts
(Docker, Django, PostgreSQL) are tested with the real services."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

from core.call_record import CallRecord
from core.effects import OutboxEffect, Plan
from core.events import AnyEvent, Event
from core.fold import check_explained
from core.jsonutil import JSON, digest, sha256_bytes
from core.lifecycle import OPEN_STATUSES, REQUEST_TRANSITIONS
from core.ports import ApprovalAsk, Call, Filed, Reconciliation, RequestState
from core.state import PendingEffect, RunState


class FakeClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


class SimWorkspace:
    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = dict(files)

    def revision(self) -> str:
        return digest(self.files)[:40]

    def verify(self) -> str:
        return self.revision()

    def picked_up(self) -> str:
        return self.verify()

    def preview(self, tool: str, args: Mapping[str, JSON]) -> str | None:
        entry = SIM_TOOLS.get(tool)
        return entry.preview(self, args) if entry is not None and entry.preview is not None else None

    def sources(self, tool: str, args: Mapping[str, JSON]) -> Mapping[str, str]:
        path = str(args.get("path", ""))
        return {path: self.files[path]} if tool == "write_file" and path in self.files else {}

    def plan(self, tool: str, args: Mapping[str, JSON], idempotency_key: str, at: float) -> Plan | None:
        """A publish into the simulated outbox, fixed as the sandbox fixes one."""
        if tool != "publish":
            return None
        shown = self.preview(tool, args) or ""
        content = (str(args.get("message", "")) + "\n" + shown).encode()
        fixed = OutboxEffect(
            file=f"{idempotency_key}.patch",
            revision=self.revision(),
            message=str(args.get("message", "")),
            sha256=sha256_bytes(content),
            bytes=len(content),
        )
        return Plan(fixed.model_dump(), shown)


CheckFn = Callable[[Mapping[str, str], str], bool]


@dataclass
class SimExecutor:
    workspace: SimWorkspace
    check_passes: CheckFn = lambda files, check_id: True
    lookup_authoritative: bool = True
    outbox: dict[str, str] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    def execute(self, call: Call) -> object:
        self.calls.append(call)
        effect, data = SIM_TOOLS[call.tool].run(self, call)
        return {
            "call_id": call.call_id,
            "tool": call.tool,
            "status": "ok",
            "effect": effect,
            "revision": self.workspace.revision(),
            "data": data,
            "artifacts": [],
        }

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        if effect.kind == "workspace":
            return Reconciliation(True, True, True, "workspace re-read")
        found = effect.idempotency_key in self.outbox
        if found:
            return Reconciliation(True, True, True, "found in the outbox")
        if not self.lookup_authoritative:
            return Reconciliation(False, None, False, "lookup empty but not authoritative")
        return Reconciliation(True, False, True, "not in the outbox")


def _list_files(sim: SimExecutor, call: Call) -> tuple[str, dict[str, JSON]]:
    return "none", {"files": sorted(sim.workspace.files)}


def _read_file(sim: SimExecutor, call: Call) -> tuple[str, dict[str, JSON]]:
    path = str(call.args["path"])
    if path not in sim.workspace.files:
        return "none", {"error": f"{path} does not exist"}
    return "none", {"path": path, "content": sim.workspace.files[path]}


def _search(sim: SimExecutor, call: Call) -> tuple[str, dict[str, JSON]]:
    pattern = str(call.args["pattern"])
    hits = [p for p, text in sorted(sim.workspace.files.items()) if pattern in text]
    return "none", {"matches": hits}


def _write_file(sim: SimExecutor, call: Call) -> tuple[str, dict[str, JSON]]:
    sim.workspace.files[str(call.args["path"])] = str(call.args["content"])
    return "applied", {"path": call.args["path"]}


def _run_check(sim: SimExecutor, call: Call) -> tuple[str, dict[str, JSON]]:
    assert call.check is not None
    passed = sim.check_passes(sim.workspace.files, call.check.check_id)
    return "none", {
        "exit_code": 0 if passed else 1,
        "duration_ms": 5,
        "image_digest": "sha256:simulated",
        "output_ref": None,
        "output": "ok" if passed else "FAILED",
    }


def _publish(sim: SimExecutor, call: Call) -> tuple[str, dict[str, JSON]]:
    key = str(call.idempotency_key)
    if key in sim.outbox:
        return "none", {"duplicate": True, "idempotency_key": key}
    sim.outbox[key] = str(call.args["message"])
    return "applied", {"idempotency_key": key}


def _lookup_publish(sim: SimExecutor, call: Call) -> tuple[str, dict[str, JSON]]:
    key = str(call.args.get("idempotency_key") or call.idempotency_key)
    return "none", {"found": key in sim.outbox, "authoritative": sim.lookup_authoritative}


def _preview_write_file(workspace: SimWorkspace, args: Mapping[str, JSON]) -> str:
    path = str(args["path"])
    old = workspace.files.get(path, "").splitlines(keepends=True)
    new = str(args["content"]).splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}"))


def _preview_publish(workspace: SimWorkspace, args: Mapping[str, JSON]) -> str:
    return f"# publish of {len(workspace.files)} file(s)\n"


@dataclass(frozen=True)
class SimTool:
    """What the simulation does for one tool of the registry, as sandbox.tools.registry.SandboxTool
    is for the sandbox: its handler (the effect and the receipt's data) and, for a tool
    with an effect, what a reviewer is shown."""

    run: Callable[[SimExecutor, Call], tuple[str, dict[str, JSON]]]
    preview: Callable[[SimWorkspace, Mapping[str, JSON]], str] | None = None


SIM_TOOLS: dict[str, SimTool] = {
    "list_files": SimTool(_list_files),
    "read_file": SimTool(_read_file),
    "search": SimTool(_search),
    "write_file": SimTool(_write_file, _preview_write_file),
    "run_check": SimTool(_run_check),
    "publish": SimTool(_publish, _preview_publish),
    "lookup_publish": SimTool(_lookup_publish),
}


class MemoryApprovals:
    """Approval requests in memory, following core.lifecycle's transitions."""

    def __init__(self) -> None:
        self.requests: dict[str, ApprovalAsk] = {}
        self.status: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        self.consumed_by: dict[str, str] = {}
        self.deciders: dict[str, str] = {}
        self.due: set[str] = set()

    def _move(self, request_id: str, status: str, reason: str = "") -> bool:
        if status not in REQUEST_TRANSITIONS[self.status[request_id]]:
            return False
        self.status[request_id] = status
        self.reasons[request_id] = reason
        return True

    def request(self, ask: ApprovalAsk) -> Filed:
        for request_id, filed in self.requests.items():
            if filed.key == ask.key and self.status[request_id] == "pending":
                return Filed(request_id, new=False)
        request_id = f"req-{len(self.requests) + 1}"
        self.requests[request_id] = ask
        self.status[request_id] = "pending"
        return Filed(request_id, new=True)

    def state(self, request_id: str) -> RequestState:
        status = self.status[request_id]
        due = request_id in self.due and status in OPEN_STATUSES
        reason, by = self.reasons.get(request_id, ""), self.deciders.get(request_id, "")
        return RequestState(request_id, status, reason, self.consumed_by.get(request_id, ""), due, by)

    def consume(self, request_id: str, call_id: str) -> bool:
        if request_id in self.due or not self._move(request_id, "consumed"):
            return False
        self.consumed_by[request_id] = call_id
        return True

    def lapse(self, request_id: str, status: Literal["expired", "stale"], reason: str) -> bool:
        return self._move(request_id, status, reason)

    def cancel_open(self, run_id: str, reason: str) -> list[str]:
        return [r for r, ask in self.requests.items() if ask.run_id == run_id and self._move(r, "cancelled", reason)]

    def open_for(self, key: str) -> str:
        return next(r for r, ask in self.requests.items() if ask.key == key and self.status[r] in OPEN_STATUSES)

    def grant(self, key: str) -> None:
        self._move(self.open_for(key), "granted")

    def deny(self, key: str, reason: str) -> None:
        self._move(self.open_for(key), "denied", reason)

    def request_changes(self, key: str, message: str, by: str) -> None:
        request_id = self.open_for(key)
        self._move(request_id, "changes_requested", message)
        self.deciders[request_id] = by

    def expire(self, key: str) -> None:
        self.due.add(self.open_for(key))


class MemoryStore:
    def __init__(self, *, verify: bool = True) -> None:
        self.events: list[Event] = []
        self.snapshot: str | None = None
        self.checkpoints = 0
        self.ledger: dict[str, CallRecord] = {}
        # Each checkpoint's state is compared with the fold of the log so far, every
        # field: a change no event explains fails the run that made it (off only
        # where the fold's cost would be measured as the store's).
        self.verify = verify

    def checkpoint(self, state: RunState, events: Sequence[Event]) -> None:
        self.checkpoints += 1
        self.snapshot = state.model_dump_json()
        # Numbered as the Django store numbers them: on from the last one stored.
        last = len(self.events)
        self.events.extend(e.model_copy(update={"seq": last + n}) for n, e in enumerate(events, 1))
        for event in events:
            record = state.ledger.get(event.call_id or "")
            if record is not None:
                self.ledger[record.call_id] = record.model_copy()
        if self.verify:
            check_explained(state, cast(list[AnyEvent], self.events))

    def load(self) -> RunState:
        assert self.snapshot is not None
        return RunState.model_validate_json(self.snapshot)


class MemoryArtifacts:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, content: bytes, media_type: str) -> str:
        ref = "sha256:" + sha256_bytes(content)
        self.blobs[ref] = content
        return ref
