"""One example of every event type, for the tests that show each reader handles
each type (tests/test_event_types.py checks that no type is missing here)."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from core import events as ev

RUN = "00000000-0000-0000-0000-000000000001"
REQUEST = "00000000-0000-0000-0000-00000000000a"
TS = 1_796_000_000.0

_FIELDS: dict[type[ev.Event], dict[str, Any]] = {
    ev.RunStarted: {
        "task_id": "calc-fix",
        "policy_version": 1,
        "revision": "r0",
        "limits": {"max_proposals": 5},
        "clipped": {},
        "tools": ["read_file"],
    },
    ev.RunResumed: {"reason": "recovered: write_file attempt 1 was in flight"},
    ev.Proposed: {"number": 1, "proposal": {"tool": "read_file", "args": {"path": "src/calc.py"}}},
    ev.InvalidInput: {"gate": "validate", "problems": [{"field": "args.path", "message": "required"}]},
    ev.SecretsFound: {
        "tool": "publish",
        "findings": [{"path": "config/app.ini", "line": 3, "kind": "AWS access key id", "fingerprint": "0123456789abcdef"}],
        "decision": "refuse",
        "reason": "the policy refuses a publish that holds a secret",
        "policy_version": 1,
        "problems": [{"field": "config/app.ini:3", "message": "looks like a secret (AWS access key id); take it out of the change"}],
    },
    ev.Denied: {"tool": "delete_repo", "rule": "contract", "reason": "tool not in the contract's allowed_tools"},
    ev.CallAdmitted: {
        "tool": "read_file",
        "tool_version": "1",
        "args": {"path": "src/calc.py"},
        "decision": "allow",
        "rule": "reads",
        "revision": "r0",
    },
    ev.ApprovalRequired: {
        "tool": "publish",
        "args": {"message": "fix"},
        "revision": "r1",
        "policy_version": 1,
        "key": "k1",
        "rule": "publish asks",
        "request_id": REQUEST,
    },
    ev.ApprovalConsumed: {"key": "k1", "request_id": REQUEST},
    ev.ApprovalRefused: {"key": "k1", "request_id": REQUEST, "reason": "not this"},
    ev.ApprovalDecided: {"request_id": REQUEST, "decision": "granted", "by": "ada", "reason": "ok"},
    ev.ApprovalLapsed: {"request_id": REQUEST, "status": "expired", "reason": "no decision before the request expired"},
    ev.WaitEnded: {
        "request_id": REQUEST,
        "exit": "granted",
        "run": "running",
        "reason": "",
        "waited_seconds": 12.0,
        "total_waited_seconds": 12.0,
    },
    ev.DuplicateEffect: {"tool": "publish", "idempotency_key": "op1", "of_call": "c3", "status": "applied"},
    ev.ChangesRequested: {"tool": "publish", "key": "k1", "request_id": REQUEST, "message": "name the ticket", "by": "rita"},
    ev.PolicyChanged: {"old_version": 1, "new_version": 2},
    ev.InvariantRepaired: {"invariant": "one pending request", "repair": "woken to end the wait", "request_id": REQUEST},
    ev.KillRequested: {"by": "otto", "scope": "run"},
    ev.CallStarted: {"tool": "run_check", "attempt": 1, "idempotency_key": None},
    ev.ReceiptRecorded: {
        "tool": "run_check",
        "attempt": 1,
        "valid": True,
        "receipt": {"status": "ok", "effect": "none", "revision": "r1", "data": {}, "artifacts": []},
        "harness_revision": "r1",
    },
    ev.Retry: {"attempt": 1, "backoff_seconds": 0.5, "reason": "transient failure, no effect"},
    ev.SandboxWaiting: {"reason": "the engine does not answer", "until": TS + 60},
    ev.SandboxWaitOver: {"engine_back": True, "waited_seconds": 3.0, "detail": ""},
    ev.EgressConnection: {
        "check_id": "tests",
        "host": "pypi.internal",
        "port": 443,
        "allowed": True,
        "reason": "",
        "method": "CONNECT",
        "bytes_out": 512,
        "bytes_in": 4096,
        "duration_ms": 40,
    },
    ev.EgressConnectionsOmitted: {
        "check_id": "tests",
        "limit": 200,
        "connections": 12,
        "allowed": 10,
        "refused": 2,
        "bytes_out": 5120,
        "bytes_in": 40960,
    },
    ev.EvidenceRecorded: {"check_id": "tests", "check_version": "1", "passed": True, "exit_code": 0, "revision": "r1", "current": True},
    ev.EvidenceCleared: {"old_revision": "r1", "revision": "r2", "checks": ["tests"]},
    ev.WorkspaceChanged: {"old_revision": "r2", "revision": "r3"},
    ev.CheckRequired: {"revision": "r1", "missing": ["tests"], "for_tool": "publish"},
    ev.PendingEffectRecorded: {
        "tool": "write_file",
        "kind": "workspace",
        "idempotency_key": None,
        "reason": "the worker stopped during the call",
    },
    ev.EffectReconciled: {"applied": False, "detail": "the write did not happen"},
    ev.WriteBlocked: {"tool": "write_file", "pending": ["c2"]},
    ev.ModelNote: {"kind": "usage", "detail": {"tokens": 120}},
    ev.AgentStarted: {"preset": "claude-code", "version": "2.1.197", "image": "harness-agent:19939d691dee8b2b"},
    ev.AgentEnded: {"preset": "claude-code", "exit_code": 0, "reason": "exited", "duration_ms": 8400, "artifacts": ["sha256:" + "a" * 64]},
    ev.Stopped: {"status": "killed", "message": "killed by otto"},
}

# Every class in _FIELDS is one of the event types (ev.AnyEvent).
EXAMPLES: dict[type[ev.Event], ev.AnyEvent] = {
    cls: cast(ev.AnyEvent, cls(run_id=RUN, seq=n, ts=TS + n, call_id="c1", **fields)) for n, (cls, fields) in enumerate(_FIELDS.items(), 1)
}

E = TypeVar("E", bound=ev.Event)


def example(kind: type[E]) -> E:
    """The example of one event type, as that type (EXAMPLES holds each under its class)."""
    return cast(E, EXAMPLES[kind])


def record(event: ev.Event) -> dict[str, Any]:
    """The event as it is stored and sent (``runs.models.Event.as_dict()``)."""
    from datetime import UTC, datetime

    return {
        "run_id": event.run_id,
        "seq": event.seq,
        "type": ev.type_name(type(event)),
        "call_id": event.call_id,
        "ts": datetime.fromtimestamp(event.ts, tz=UTC).isoformat(),
        "payload": event.payload(),
    }
