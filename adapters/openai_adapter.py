"""OpenAI-compatible Chat Completions tool calling through the official ``openai``
client. ``base_url`` makes it work with vLLM, Ollama, llama.cpp server and similar.

Wire format: the system prompt and the task are the first two messages; tools are
``{"type": "function", "function": {name, description, parameters}}``; each harness
answer goes back as a ``{"role": "tool", "tool_call_id": ...}`` message, all of one
response's calls together in the next request."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import openai

from adapters.calls import ModelReply, ToolCall, ToolResult, parse_arguments
from adapters.context import task_message
from adapters.conversation import ToolCallingProposer, json_list
from adapters.retries import Failure, SdkErrors
from core.jsonutil import JSON

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


ERRORS = SdkErrors(openai.APIStatusError, openai.APITimeoutError, openai.APIConnectionError, openai.OpenAIError)


class OpenAIProposer(ToolCallingProposer[openai.OpenAI]):
    provider = "openai"

    def __init__(
        self,
        *,
        tool_choice: OpenAIToolChoice = "required",
        output_limit: OutputLimitSetting = "auto",
        seed: int | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.tool_choice = tool_choice
        self.seed = seed
        self.output_limit_field = output_limit_field(self.base_url, output_limit)

    def _new_client(self, *, api_key: str | None, base_url: str | None, max_retries: int, timeout: float) -> openai.OpenAI:
        return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout)

    def tool_params(self) -> list[dict[str, JSON]]:
        return [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}} for t in self.offered()
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
        options: dict[str, int] = {self.output_limit_field: max_output_tokens}
        if self.seed is not None:
            options["seed"] = self.seed
        response = self.client().chat.completions.create(
            model=self.model,
            messages=cast(Any, messages),
            tools=cast(Any, self.tool_params()),
            tool_choice=self.tool_choice,
            timeout=timeout,
            **cast(Any, options),
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

    def _reply_text(self) -> str:
        content = self.messages[-1].get("content")
        return content if isinstance(content, str) else ""

    def _echo_refused(self, call_id: str, kept: dict[str, JSON]) -> None:
        if not call_id:
            self.messages[-1]["content"] = json.dumps(kept)
        for echoed in json_list(self.messages[-1].get("tool_calls")):
            if isinstance(echoed, dict) and echoed.get("id") == call_id and isinstance(echoed.get("function"), dict):
                echoed["function"]["arguments"] = json.dumps(kept)

    def _classify(self, exc: Exception) -> Failure | None:
        return ERRORS.classify(exc)


def _tokens(usage: object, side: Literal["prompt", "completion"]) -> int | None:
    value = getattr(usage, f"{side}_tokens", None) if usage is not None else None
    return value if isinstance(value, int) and value >= 0 else None
