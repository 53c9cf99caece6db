"""Anthropic Messages API tool use through the official ``anthropic`` client.

Wire format: the system prompt is the ``system`` parameter and the task the first
user message; tools are ``{name, description, input_schema}``; the model's
``tool_use`` blocks are answered by one user message holding a ``tool_result`` block
per call (``tool_use_id``, ``is_error`` for refusals), all of one response's calls
together."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, cast

import anthropic

from adapters.calls import ModelReply, ToolCall, ToolResult, parse_arguments
from adapters.context import task_message
from adapters.conversation import ToolCallingProposer, json_list
from adapters.retries import Failure, SdkErrors
from core.jsonutil import JSON

AnthropicToolChoice = Literal["any", "auto"]


ERRORS = SdkErrors(anthropic.APIStatusError, anthropic.APITimeoutError, anthropic.APIConnectionError, anthropic.AnthropicError)


class AnthropicProposer(ToolCallingProposer[anthropic.Anthropic]):
    provider = "anthropic"

    def __init__(self, *, tool_choice: AnthropicToolChoice = "any", **common: Any) -> None:
        super().__init__(**common)
        self.tool_choice = tool_choice

    def _new_client(self, *, api_key: str | None, base_url: str | None, max_retries: int, timeout: float) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout)

    def tool_params(self) -> list[dict[str, JSON]]:
        return [{"name": t.name, "description": t.description, "input_schema": t.schema} for t in self.offered()]

    def _initial_messages(self) -> list[dict[str, JSON]]:
        return [{"role": "user", "content": task_message(self.context, self.tools, self.settings.max_result_chars)}]

    def _result_messages(self, results: Sequence[ToolResult], user_texts: Sequence[str]) -> list[dict[str, JSON]]:
        if not results and not user_texts:
            return []
        if not results:
            return [{"role": "user", "content": "\n\n".join(user_texts)}]
        # tool_result blocks come first in the user message, as the API requires.
        blocks: list[JSON] = [
            {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error} for r in results
        ]
        blocks += [{"type": "text", "text": text} for text in user_texts]
        return [{"role": "user", "content": blocks}]

    def _send(self, messages: list[dict[str, JSON]], max_output_tokens: int, timeout: float) -> ModelReply:
        response = self.client().messages.create(
            model=self.model,
            max_tokens=max_output_tokens,
            system=self.system,
            messages=cast(Any, messages),
            tools=cast(Any, self.tool_params()),
            tool_choice=cast(Any, {"type": self.tool_choice}),
            timeout=timeout,
        )
        calls: list[ToolCall] = []
        content: list[JSON] = []
        texts: list[str] = []
        for block in response.content:
            if block.type == "text":
                texts.append(block.text)
                content.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                args, error = parse_arguments(block.input)
                calls.append(ToolCall(block.id, block.name, args, error))
                # The API wants the input back as an object; one not read goes back empty.
                content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input if error is None else {}})
        if not content:  # the API refuses an empty assistant turn in the next request
            content.append({"type": "text", "text": "(no content)"})
        usage = response.usage
        input_tokens = usage.input_tokens + (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
        return ModelReply(
            {"role": "assistant", "content": content},
            "\n".join(texts),
            calls,
            input_tokens,
            usage.output_tokens,
            response.stop_reason,
        )

    def _reply_text(self) -> str:
        blocks = json_list(self.messages[-1].get("content"))
        return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")

    def _echo_refused(self, call_id: str, kept: dict[str, JSON]) -> None:
        if not call_id:
            self.messages[-1]["content"] = [{"type": "text", "text": json.dumps(kept)}]
        for block in json_list(self.messages[-1].get("content")):
            if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("id") == call_id:
                block["input"] = kept

    def _classify(self, exc: Exception) -> Failure | None:
        return ERRORS.classify(exc)
