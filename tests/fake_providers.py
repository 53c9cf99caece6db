"""Local stand-ins for the model providers: HTTP servers on 127.0.0.1 (stdlib
``http.server`` in a thread, random port) that speak the OpenAI Chat Completions and
Anthropic Messages wire formats. Every request is recorded (path, headers, JSON body)
for field-by-field assertions; replies come from a script of ``Reply`` values or a
function of the request."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from core.events import ModelNote


@dataclass(frozen=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    # Sent instead of ``body`` as JSON: a body Python's encoder would not write (nested
    # deeper than it recurses).
    raw: bytes | None = None


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Responder = Callable[[dict[str, Any], int], Reply]


class FakeProvider:
    """One provider's endpoint. ``script`` replies are served in order; once they run
    out (or when a ``responder`` is given) the responder decides."""

    path = ""

    def __init__(self, script: Sequence[Reply] = (), responder: Responder | None = None) -> None:
        self.script = list(script)
        self.responder = responder
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"unparsable": raw.decode("utf-8", "replace")}
                reply = provider._record(self.command, self.path, dict(self.headers.items()), body)
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def _record(self, method: str, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        with self._lock:
            number = len(self.requests)
            self.requests.append(Recorded(method, path, {k.lower(): v for k, v in headers.items()}, body))
            if path != self.path:
                return Reply(404, {"error": {"message": f"no route {path}", "type": "not_found_error"}})
            if self.script:
                return self.script.pop(0)
            if self.responder is not None:
                return self.responder(body, number)
            return Reply(500, {"error": {"message": "the fake provider's script ran out", "type": "api_error"}})

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


# -- OpenAI Chat Completions ---------------------------------------------------


class FakeOpenAI(FakeProvider):
    path = "/v1/chat/completions"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def openai_message(message: dict[str, Any], finish_reason: str, usage: tuple[int, int] | None, model: str) -> Reply:
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": usage[0] + usage[1]}
    return Reply(200, body)


def openai_tools(
    *calls: tuple[str, str, dict[str, Any] | str],
    usage: tuple[int, int] | None = (100, 20),
    text: str | None = None,
    model: str = "gpt-4o-mini",
) -> Reply:
    """A response with tool calls ``(id, name, args)``; a str ``args`` is sent as is."""
    tool_calls = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
        for cid, name, args in calls
    ]
    return openai_message({"role": "assistant", "content": text, "tool_calls": tool_calls}, "tool_calls", usage, model)


def openai_text(text: str, usage: tuple[int, int] | None = (100, 20), model: str = "gpt-4o-mini") -> Reply:
    return openai_message({"role": "assistant", "content": text}, "stop", usage, model)


def openai_error(status: int, message: str, retry_after: str | None = None) -> Reply:
    kinds = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_exceeded", 500: "server_error"}
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    body = {"error": {"message": message, "type": kinds.get(status, "api_error"), "param": None, "code": None}}
    return Reply(status, body, headers)


# -- Anthropic Messages ----------------------------------------------------------


class FakeAnthropic(FakeProvider):
    path = "/v1/messages"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def anthropic_message(
    content: list[dict[str, Any]], stop_reason: str, usage: tuple[int, int] | None, model: str = "claude-sonnet-4-6"
) -> Reply:
    body: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]} if usage else {"input_tokens": 0, "output_tokens": 0},
    }
    return Reply(200, body)


def anthropic_tools(
    *calls: tuple[str, str, Any],
    usage: tuple[int, int] | None = (100, 20),
    text: str | None = None,
    model: str = "claude-sonnet-4-6",
) -> Reply:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls]
    return anthropic_message(content, "tool_use", usage, model)


def anthropic_text(text: str, usage: tuple[int, int] | None = (100, 20), model: str = "claude-sonnet-4-6") -> Reply:
    return anthropic_message([{"type": "text", "text": text}], "end_turn", usage, model)


def anthropic_error(status: int, message: str, retry_after: str | None = None) -> Reply:
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        429: "rate_limit_error",
        500: "api_error",
        529: "overloaded_error",
    }
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return Reply(status, {"type": "error", "error": {"type": kinds.get(status, "api_error"), "message": message}}, headers)


# -- wiring an adapter into a simulated rig ---------------------------------------

API_KEY = "sk-test-0123456789abcdefSECRET"


def adapter(kind: str, base_url: str, rig: Any, **overrides: Any) -> Any:
    """An adapter for ``rig``'s run, talking to a fake provider, sleeping on the rig's
    fake clock and bounded by the run's deadline; it replaces the rig's proposer."""
    from adapters.anthropic_adapter import AnthropicProposer
    from adapters.context import TaskContext, ToolDef
    from adapters.conversation import AdapterSettings
    from adapters.openai_adapter import OpenAIProposer
    from adapters.pricing import Budget
    from adapters.retries import RetryPolicy
    from core.tools import builtin_registry

    state = rig.state
    args: dict[str, Any] = {
        "model": "gpt-4o-mini" if kind == "openai" else "claude-sonnet-4-6",
        "api_key": API_KEY,
        "base_url": base_url,
        "context": TaskContext.from_contract(state.contract, revision=state.revision),
        "tools": [ToolDef.from_spec(s) for s in builtin_registry().visible(state.contract.allowed_tools)],
        "budget": Budget(),
        "price": None,
        "snapshot": state.proposer_state or None,
        "settings": AdapterSettings(max_output_tokens=1024, retry=RetryPolicy(max_retries=3, base_seconds=0.25, max_seconds=4.0)),
        "clock": rig.clock,
        "deadline": state.deadline,
    }
    args.update(overrides)
    proposer = OpenAIProposer(**args) if kind == "openai" else AnthropicProposer(**args)
    rig.harness.context.proposer = proposer
    return proposer


def reload(rig: Any) -> Any:
    """What a new worker does: load the stored state and build a new Harness around it
    (same simulated world); the caller attaches a proposer rebuilt from the snapshot."""
    from core.loop import Harness

    old = rig.harness.context
    state = rig.store.load()
    rig.state = state
    rig.harness = Harness(
        state,
        registry=old.registry,
        policy=old.policy,
        proposer=old.proposer,
        executor=old.executor,
        workspace=old.workspace,
        approvals=old.approvals,
        store=old.store,
        artifacts=old.artifacts,
        clock=old.clock,
        config=old.config,
    )
    return rig


def model_notes(rig: Any) -> list[dict[str, Any]]:
    return [{"kind": e.kind, **e.detail} for e in rig.store.events if isinstance(e, ModelNote)]
