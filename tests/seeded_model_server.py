"""A model on 127.0.0.1 whose answers vary by seed, for the trials' tests: an
OpenAI-compatible Chat Completions server (tests.fake_providers.FakeOpenAI) that reads
the request's ``seed`` (each trial repetition asks with its own, trials.spec.proposer_for),
draws one of its scripts with it, and answers the conversation's next turn from that
script, one tool call a reply; once the script is spent it calls ``finish``. The usage
it reports grows with what it is sent and what it answers (about four characters a
token), so tokens and cost differ between runs as a real model's would. Every seed's
draw is kept (``drawn``) for the test to compare with what the runs did.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Sequence
from typing import Any

from tests.fake_providers import FakeOpenAI, Reply, openai_error, openai_tools

Script = list[dict[str, Any]]


def turn_of(messages: Sequence[dict[str, Any]]) -> int:
    """The conversation's next turn: how many times the model has answered already."""
    return sum(1 for message in messages if message.get("role") == "assistant")


def tokens(value: object) -> int:
    return max(1, len(json.dumps(value)) // 4)


class SeededModel(FakeOpenAI):
    """``choices``: (weight, name, script) the seed draws from, as ``random.Random(seed)``."""

    def __init__(self, choices: Sequence[tuple[float, str, Script]], model: str = "gpt-4o-mini") -> None:
        self.choices = list(choices)
        self.model = model
        self.drawn: dict[int, str] = {}
        self._drawn_lock = threading.Lock()
        super().__init__(responder=self.answer)

    def draw(self, seed: int) -> tuple[str, Script]:
        _, name, script = random.Random(seed).choices(self.choices, weights=[c[0] for c in self.choices])[0]
        with self._drawn_lock:
            self.drawn[seed] = name
        return name, script

    def answer(self, body: dict[str, Any], number: int) -> Reply:
        seed = body.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            return openai_error(400, "this model answers by seed: send an integer 'seed'")
        messages = body.get("messages") or []
        _, script = self.draw(seed)
        turn = turn_of(messages)
        step: dict[str, Any] = script[turn] if turn < len(script) else {"tool": "finish", "args": {"summary": "done"}}
        usage = (tokens(messages) + tokens(body.get("tools") or []), 12 + tokens(step["args"]))
        return openai_tools((f"call_{seed % 10_000}_{turn}", step["tool"], step["args"]), usage=usage, model=self.model)
