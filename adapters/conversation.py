"""The proposer the model adapters share: ``ToolCallingProposer``.

- **Context**, in a fixed order: the task and its acceptance criteria, repository
  instructions and state, relevant source, then (as the conversation goes on) tool
  results and evidence (``context``, ``summaries``).
- **Untrusted output**: everything a tool returned is wrapped in a marked block that
  says it is data, not instructions (``context.untrusted``, ``feedback``).
- **Budgets** from the provider's usage numbers and a per-model price table; a run
  stops ``budget_exhausted`` before a request that would cross them (``pricing``).
- **Model errors** are not tool errors: 429/5xx/connection failures are retried with
  exponential backoff within a bounded number of retries and never past the run's
  deadline; other failures (401/403/400...) stop the run ``model_error`` with the
  provider's message (``retries``). Every request, retry and error becomes a note (a
  ``model`` event).
- **Durable conversation**: messages, the queue of tool calls not yet proposed, the
  results not yet sent and the usage totals are all in ``snapshot()``, so a reloaded
  run continues the same conversation without asking the model again for a step it
  already took.

The provider modules only translate to and from their wire format."""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from adapters.calls import ModelReply, ToolCall, ToolResult, unreadable_reply
from adapters.context import SYSTEM_PROMPT, TaskContext, ToolDef
from adapters.feedback import render_feedback, skipped_result
from adapters.pricing import Budget, Price, UsageTotals, estimate_tokens
from adapters.retries import Failure, RetryPolicy
from core import feedback as fb
from core import storable
from core.jsonutil import JSON
from core.ports import Clock, ProposerStopped, SystemClock

REDACTED = "[redacted]"


@dataclass(frozen=True)
class AdapterSettings:
    """Server-side knobs (from Django settings; never from the run)."""

    request_timeout_seconds: float = 120.0
    max_output_tokens: int = 4096
    max_result_chars: int = 12_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)


ClientT = TypeVar("ClientT")


class ToolCallingProposer(ABC, Generic[ClientT]):
    """The Proposer protocol over a tool-calling chat API.

    State machine: the model's tool calls are queued and proposed one at a time; the
    harness's feedback for each becomes a tool result; when the queue is empty, all
    results go back together in the next request. A call after a refused one is not
    proposed (its result says it was skipped). A reply without tool calls becomes a
    proposal the parse gate refuses, and the model is told to call a tool."""

    provider: str = ""

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        context: TaskContext,
        tools: Sequence[ToolDef],
        budget: Budget,
        price: Price | None,
        snapshot: Mapping[str, JSON] | None = None,
        settings: AdapterSettings | None = None,
        clock: Clock | None = None,
        deadline: float | None = None,
        base_url: str | None = None,
        client: ClientT | None = None,
        bound: Callable[[], Budget] | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self._client = client
        self._api_key = api_key or None
        self.context = context
        self.tools = list(tools)
        # The run's own budget, and what bounds it beyond (its project's: what the
        # project's other runs left), read again before every request.
        self.own_budget = self.budget = budget
        self.bound = bound
        self.price = price
        self.settings = settings or AdapterSettings()
        self.clock = clock or SystemClock()
        self.deadline = deadline
        self._notes: list[dict[str, JSON]] = []
        self.system = SYSTEM_PROMPT
        self.messages: list[dict[str, JSON]] = []
        self.queue: list[ToolCall] = []
        self.awaiting: ToolCall | None = None
        self.results: list[ToolResult] = []
        self.user_texts: list[str] = []
        self.usage = UsageTotals()
        # In the budget's reserve: only the closing tools are offered and taken.
        self.closing = False
        if snapshot and snapshot.get("kind") == self.provider:
            self._restore(snapshot)

    def client(self) -> ClientT:
        """The provider's official client, made on first use."""
        if self._client is None:
            self._client = self._new_client(
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=0,  # retries are ours, so they are bounded by the deadline and show as events
                timeout=self.settings.request_timeout_seconds,
            )
        return self._client

    # -- provider specifics --------------------------------------------------------

    @abstractmethod
    def _new_client(self, *, api_key: str | None, base_url: str | None, max_retries: int, timeout: float) -> ClientT:
        """The official client with these options."""

    @abstractmethod
    def _initial_messages(self) -> list[dict[str, JSON]]:
        """The conversation's first messages (the task message, and for providers that
        take it as a message, the system prompt)."""

    @abstractmethod
    def _result_messages(self, results: Sequence[ToolResult], user_texts: Sequence[str]) -> list[dict[str, JSON]]:
        """The messages carrying tool results (and any plain user text) back."""

    @abstractmethod
    def _send(self, messages: list[dict[str, JSON]], max_output_tokens: int, timeout: float) -> ModelReply:
        """One request through the official client (its own retries off)."""

    @abstractmethod
    def _reply_text(self) -> str:
        """The text of the last reply."""

    @abstractmethod
    def _echo_refused(self, call_id: str, kept: dict[str, JSON]) -> None:
        """Put ``kept`` in place of call ``call_id``'s arguments in the last reply (of
        its text, for "")."""

    @abstractmethod
    def _classify(self, exc: Exception) -> Failure | None:
        """A provider error as a Failure; None for anything that is not one."""

    # -- the Proposer protocol -----------------------------------------------------

    def propose(self, feedback: fb.Feedback | None) -> object | None:
        if self.awaiting is not None:
            self._settle(self.awaiting, feedback)
            self.awaiting = None
        elif feedback is not None and self.messages:
            self.user_texts.append(self._render(feedback, None)[0])
        if self.queue:
            return self._take_next()
        if self.bound is not None:
            # Read before every request, not once per run: runs of one project started
            # together each saw the whole budget left and together used it twice over.
            self.budget = self.own_budget.intersect(self.bound())
        if not self.closing and self._working_budget_used():
            self._enter_closing()
        base = self.messages or self._initial_messages()
        outgoing = base + self._result_messages(self.results, self.user_texts)
        reply = self._ask(outgoing)
        # The reply and what it answers are committed together: a model call that
        # failed leaves the conversation as it was.
        self.messages = outgoing + [reply.assistant]
        self.results, self.user_texts = [], []
        if not reply.calls:
            self.awaiting = ToolCall("", "", None, reply.unread)
            return {"text": reply.text}
        self.queue = list(reply.calls)
        return self._take_next()

    def snapshot(self) -> dict[str, JSON]:
        state: dict[str, JSON] = {
            "kind": self.provider,
            "model": self.model,
            "system": self.system,
            "messages": self.messages,
            "queue": [c.to_json() for c in self.queue],
            "awaiting": self.awaiting.to_json() if self.awaiting else None,
            "results": [r.to_json() for r in self.results],
            "user_texts": list(self.user_texts),
            "usage": self.usage.to_json(),
            "budget": {
                "max_tokens": self.budget.max_tokens,
                "max_cost_usd": self.budget.max_cost_usd,
                "reserve_tokens": self.budget.reserve_tokens,
                "reserve_cost_usd": self.budget.reserve_cost_usd,
            },
            "closing": self.closing,
        }
        # A deep copy: the caller stores it, and the conversation keeps changing.
        copied: dict[str, JSON] = json.loads(json.dumps(state))
        return copied

    def notes(self) -> list[dict[str, JSON]]:
        notes, self._notes = self._notes, []
        return notes

    def refused(self) -> None:
        """The call awaiting its answer (or a reply of text alone) was refused by the
        gates: when what the model sent is larger than the run keeps whole, the call and
        the conversation's copy of the reply keep its summary (size, digest, head)
        instead, so neither the checkpoint nor the next request carries it (a refused
        6 MB answer stored twice in the proposer's state was 12.6 MB)."""
        call = self.awaiting
        if call is None:
            return
        raw = call.args if call.id else self._reply_text()
        found = storable.summary(raw)
        if found.bytes <= storable.HEAD_CHARS and not storable.problems(raw):
            return
        kept: dict[str, JSON] = {"refused_arguments" if call.id else "refused_text": found.model_dump()}
        if call.id:
            self.awaiting = ToolCall(call.id, call.name, kept, call.args_error)
        self._echo_refused(call.id, kept)

    # -- internals -------------------------------------------------------------------

    def _restore(self, snap: Mapping[str, JSON]) -> None:
        system = snap.get("system")
        if isinstance(system, str):
            self.system = system
        self.messages = [m for m in json_list(snap.get("messages")) if isinstance(m, dict)]
        self.queue = [ToolCall.from_json(c) for c in json_list(snap.get("queue")) if isinstance(c, dict)]
        awaiting = snap.get("awaiting")
        self.awaiting = ToolCall.from_json(awaiting) if isinstance(awaiting, dict) else None
        self.results = [ToolResult.from_json(r) for r in json_list(snap.get("results")) if isinstance(r, dict)]
        self.user_texts = [str(t) for t in json_list(snap.get("user_texts"))]
        self.usage = UsageTotals.from_json(snap.get("usage"))
        self.closing = snap.get("closing") is True

    def _take_next(self) -> dict[str, JSON]:
        call = self.queue.pop(0)
        if self.closing and call.name not in {t.name for t in self.offered()}:
            raise self._stop(
                "budget_exhausted",
                f"the model budget is used up but for its reserve, kept for verification and the report, where only "
                f"{' and '.join(t.name for t in self.offered())} are taken; the model proposed {call.name}",
                limit="reserve",
                tool=call.name,
            )
        self.awaiting = call
        # An MCP tool goes back to the gates under its registry name (ToolDef.registry_name).
        named = {t.name: t.registry_name for t in self.tools if t.registry_name}
        return {"tool": named.get(call.name, call.name), "args": call.args}

    def offered(self) -> list[ToolDef]:
        """The tools the next request offers: in the reserve, the closing ones alone."""
        return [t for t in self.tools if t.closing] if self.closing else self.tools

    def _working_budget_used(self) -> bool:
        """Whether the next request would reach into the reserve (the budget less the
        reserve is what the model works with)."""
        used, next_input, budget = self.usage, self.usage.last_input_tokens, self.budget
        tokens_left = None if budget.max_tokens is None else budget.max_tokens - budget.reserve_tokens - used.tokens - next_input
        if budget.reserve_tokens > 0 and tokens_left is not None and tokens_left < 1:
            return True
        return (
            budget.reserve_cost_usd > 0
            and budget.max_cost_usd is not None
            and self.price is not None
            and budget.max_cost_usd - budget.reserve_cost_usd - used.cost_usd - self.price.cost(next_input, 0) <= 0
        )

    def _enter_closing(self) -> None:
        self.closing = True
        self.user_texts.append(CLOSING_NOTICE)
        self._notes.append(
            {
                "kind": "budget_reserve",
                "message": "the working budget is used up: the model has the reserve for verification and the report",
                "used_tokens": self.usage.tokens,
                "reserve_tokens": self.budget.reserve_tokens,
                "used_cost_usd": round(self.usage.cost_usd, 8),
                "reserve_cost_usd": self.budget.reserve_cost_usd,
            }
        )

    def _render(self, feedback: fb.Feedback | None, call: ToolCall | None) -> tuple[str, bool]:
        evidence_tools = [t.name for t in self.tools if t.evidence]
        return render_feedback(feedback, call, self.settings.max_result_chars, evidence_tools)

    def _settle(self, call: ToolCall, feedback: fb.Feedback | None) -> None:
        content, refused = self._render(feedback, call)
        if call.id == "":  # the reply had no tool call: answer in plain text
            self.user_texts.append(content)
            return
        self.results.append(ToolResult(call.id, content, refused))
        if refused and self.queue:
            self.results += [ToolResult(q.id, skipped_result(call), True) for q in self.queue]
            self.queue = []

    def _scrub(self, text: str) -> str:
        if self._api_key and len(self._api_key) >= 4:
            text = text.replace(self._api_key, REDACTED)
        return text

    def _stop(self, reason: Literal["budget_exhausted", "model_error"], message: str, **detail: JSON) -> ProposerStopped:
        message = self._scrub(message)
        self._notes.append({"kind": "budget_exhausted" if reason == "budget_exhausted" else "error", "message": message, **detail})
        return ProposerStopped(reason, message)

    def _output_cap(self) -> int:
        """The next request's max output tokens: the server's per-request cap, less
        than what is left of the budget once the known input size is counted."""
        cap = self.settings.max_output_tokens
        used, next_input = self.usage, self.usage.last_input_tokens
        if self.budget.max_tokens is not None:
            left = self.budget.max_tokens - used.tokens - next_input
            if left < 1:
                raise self._stop(
                    "budget_exhausted",
                    f"token budget exhausted{_by(self.budget.tokens_by)}{self._reserve_said()}: {used.tokens} of {self.budget.max_tokens} tokens used (input "
                    f"{used.input_tokens}, output {used.output_tokens}) over {used.requests} model requests; the next "
                    f"request would need at least {next_input} input tokens",
                    limit="tokens",
                    used_tokens=used.tokens,
                    max_tokens=self.budget.max_tokens,
                )
            cap = min(cap, left)
        if self.budget.max_cost_usd is not None and self.price is not None:
            left_usd = self.budget.max_cost_usd - used.cost_usd - self.price.cost(next_input, 0)
            if left_usd <= 0:
                raise self._stop(
                    "budget_exhausted",
                    f"cost budget exhausted{_by(self.budget.cost_by)}{self._reserve_said()}: ${used.cost_usd:.4f} of ${self.budget.max_cost_usd:.4f} used over "
                    f"{used.requests} model requests; the next request's input alone would cost about "
                    f"${self.price.cost(next_input, 0):.4f}",
                    limit="cost",
                    used_cost_usd=round(used.cost_usd, 8),
                    max_cost_usd=self.budget.max_cost_usd,
                )
            if self.price.output_per_mtok > 0:
                cap = min(cap, max(1, math.floor(round(left_usd * 1_000_000 / self.price.output_per_mtok, 6))))
        return max(1, cap)

    def _reserve_said(self) -> str:
        return ", the reserve for verification and the report included" if self.closing else ""

    def _ask(self, messages: list[dict[str, JSON]]) -> ModelReply:
        max_output = self._output_cap()
        if not self._api_key:
            raise self._stop("model_error", f"no API key is configured on the server for {self.provider}", status=None)
        retries = 0
        while True:
            timeout = self.settings.request_timeout_seconds
            if self.deadline is not None:
                left = self.deadline - self.clock.now()
                if left <= 0:
                    raise self._stop("model_error", f"the run's deadline passed before {self.provider} answered", status=None)
                timeout = min(timeout, left)
            try:
                reply = self._send(messages, max_output, timeout)
            except RecursionError:
                # The client's JSON parse of the response gave up: nested deeper than
                # Python's parser goes. An answer like any other (it used the model).
                reply = unreadable_reply(f"nested more than {storable.MAX_DEPTH} levels deep")
            except Exception as exc:
                failure = self._classify(exc)
                if failure is None:
                    raise
                retries += 1
                self._handle_failure(failure, retries)
                continue
            self._account(reply, messages)
            return reply

    def _handle_failure(self, failure: Failure, retries: int) -> None:
        """Note a failed request, then sleep before the retry or raise the stop."""
        described = f"{self.provider} {failure.status or failure.category}: {failure.message}"
        detail: dict[str, JSON] = {"status": failure.status, "category": failure.category, "provider": self.provider}
        if not failure.retryable:
            raise self._stop("model_error", described, **detail)
        if retries > self.settings.retry.max_retries:
            raise self._stop("model_error", f"{described} (gave up after {retries - 1} retries)", **detail)
        backoff = self.settings.retry.backoff(retries, failure.retry_after)
        if self.deadline is not None and self.clock.now() + backoff >= self.deadline:
            raise self._stop("model_error", f"{described} (a retry after {backoff:.2f}s would cross the run's deadline)", **detail)
        self._notes.append(
            {"kind": "retry", "retry": retries, "backoff_seconds": backoff, "message": self._scrub(failure.message), **detail}
        )
        self.clock.sleep(backoff)

    def _account(self, reply: ModelReply, messages: list[dict[str, JSON]]) -> None:
        estimated = reply.input_tokens is None or reply.output_tokens is None
        input_tokens = reply.input_tokens if reply.input_tokens is not None else estimate_tokens(messages)
        output_tokens = reply.output_tokens if reply.output_tokens is not None else estimate_tokens(reply.assistant)
        cost = self.price.cost(input_tokens, output_tokens) if self.price is not None else None
        usage = self.usage
        usage.requests += 1
        usage.input_tokens += input_tokens
        usage.output_tokens += output_tokens
        usage.cost_usd += cost or 0.0
        usage.estimated = usage.estimated or estimated
        usage.last_input_tokens = input_tokens
        self._notes.append(
            {
                "kind": "usage",
                "provider": self.provider,
                "model": self.model,
                "request": usage.requests,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cost_usd": round(cost, 8) if cost is not None else None,
                "estimated": estimated,
                "total_tokens": usage.tokens,
                "total_cost_usd": round(usage.cost_usd, 8),
                "max_tokens": self.budget.max_tokens,
                "max_cost_usd": self.budget.max_cost_usd,
                "tool_calls": len(reply.calls),
                "stop_reason": reply.stop_reason,
            }
        )


CLOSING_NOTICE = (
    "Harness: your model budget is used up except a reserve kept for verification and your report. "
    "Only the tools offered now are available: run the checks you need on the current revision, then finish "
    "with a summary of what is done and what is not. Any other tool stops the run."
)


def json_list(value: object) -> list[JSON]:
    return list(value) if isinstance(value, list) else []


def _by(whose: str) -> str:
    return f" ({whose})" if whose else ""
