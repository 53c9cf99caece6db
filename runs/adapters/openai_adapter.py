"""OpenAI-compatible Chat Completions tool calling through the official ``openai``
client. ``base_url`` makes it work with vLLM, Ollama, llama.cpp server and similar.

Wire format: the system prompt and the task are the first two messages; tools are
``{"type": "function", "function": {name, description, parameters}}``; each harness
answer goes back as a ``{"role": "tool", "tool_call_id": ...}`` message, all of one
response's calls together in the next request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import openai

from runs.adapters.conversation import (
    Failure,
    ModelReply,
    ToolCall,
    ToolCallingProposer,
    ToolResult,
    classify_status,
    parse_arguments,
    provider_message,
    task_message,
)
from runs.core.jsonutil import JSON

OpenAIToolChoice = Literal["required", "auto"]
OutputLimitField = Literal["max_tokens", "max_completion_tokens"]
OutputLimitSetting = Literal["auto", "max_tokens", "max_completion_tokens"]
OFFICIAL_HOST = "api.openai.com"


def output_limit_field(base_url: str | None, configured: OutputLimitSetting) -> OutputLimitField:
    """The request field that caps a reply's tokens. OpenAI's own API wants
    ``max_completion_tokens`` (its reasoning models refuse ``max_tokens``); most
    compatible servers only know ``max_tokens``."""
    if configured != "auto":
        return configured
    official = base_url is None or urlsplit(base_url).hostname == OFFICIAL_HOST
    return "max_completion_tokens" if official else "max_tokens"


class OpenAIProposer(ToolCallingProposer):
    provider = "openai"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        tool_choice: OpenAIToolChoice = "required",
        output_limit: OutputLimitSetting = "auto",
        client: openai.OpenAI | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.base_url = base_url
        self.tool_choice = tool_choice
        self.output_limit_field = output_limit_field(base_url, output_limit)
        self._client = client

    def client(self) -> openai.OpenAI:
        if self._client is None:
            self._client = openai.OpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                max_retries=0,  # retries are ours, so they are bounded by the deadline and show as events
                timeout=self.settings.request_timeout_seconds,
            )
        return self._client

    def tool_params(self) -> list[dict[str, JSON]]:
        return [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}} for t in self.tools
        ]

    def _initial_messages(self) -> list[dict[str, JSON]]:
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": task_message(self.context, self.tools, self.settings.max_result_chars)},
        ]

    def _result_messages(self, results: Sequence[ToolResult], user_texts: Sequence[str]) -> list[dict[str, JSON]]:
        messages: list[dict[str, JSON]] = [{"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in results]
        if user_texts:
            messages.append({"role": "user", "content": "\n\n".join(user_texts)})
        return messages

    def _send(self, messages: list[dict[str, JSON]], max_output_tokens: int, timeout: float) -> ModelReply:
        limit: dict[str, int] = {self.output_limit_field: max_output_tokens}
        response = self.client().chat.completions.create(
            model=self.model,
            messages=cast(Any, messages),
            tools=cast(Any, self.tool_params()),
            tool_choice=self.tool_choice,
            timeout=timeout,
            **cast(Any, limit),
        )
        usage = response.usage
        number = self.usage.requests + 1
        if not response.choices:
            return ModelReply({"role": "assistant", "content": ""}, "", [], _tokens(usage, "prompt"), _tokens(usage, "completion"))
        choice = response.choices[0]
        message = choice.message
        calls: list[ToolCall] = []
        echoed: list[dict[str, JSON]] = []
        for index, tool_call in enumerate(message.tool_calls or []):
            if tool_call.type == "function":
                name, raw = tool_call.function.name, tool_call.function.arguments
            else:
                name, raw = tool_call.custom.name, tool_call.custom.input
            call_id = tool_call.id or f"call_{number}_{index}"
            args, error = parse_arguments(raw)
            calls.append(ToolCall(call_id, name, args, error))
            echoed.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
        text = message.content or message.refusal or ""
        assistant: dict[str, JSON] = {"role": "assistant", "content": message.content if calls else text}
        if echoed:
            assistant["tool_calls"] = echoed
        return ModelReply(assistant, text, calls, _tokens(usage, "prompt"), _tokens(usage, "completion"), choice.finish_reason)

    def _classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, openai.APIStatusError):
            message = provider_message(exc.body, exc.message)
            return classify_status(exc.status_code, message, dict(exc.response.headers))
        if isinstance(exc, openai.APITimeoutError):
            return Failure("timeout", None, "the request timed out")
        if isinstance(exc, openai.APIConnectionError):
            return Failure("connection", None, f"connection error: {exc}")
        if isinstance(exc, openai.OpenAIError):
            return Failure("other", None, f"{type(exc).__name__}: {exc}")
        return None


def _tokens(usage: object, side: Literal["prompt", "completion"]) -> int | None:
    value = getattr(usage, f"{side}_tokens", None) if usage is not None else None
    return value if isinstance(value, int) and value >= 0 else None
