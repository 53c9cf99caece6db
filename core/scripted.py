"""The scripted proposer: a fixed list of proposals, or a function of the last
feedback. Used by tests, demos and replays; its position is part of run state."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from core.feedback import Feedback
from core.jsonutil import JSON

ScriptFn = Callable[[Feedback | None, int], object | None]


class ScriptedProposer:
    def __init__(self, script: Sequence[object] | ScriptFn, position: int = 0) -> None:
        self._script = script
        self.position = position

    def propose(self, feedback: Feedback | None) -> object | None:
        if callable(self._script):
            proposal = self._script(feedback, self.position)
        elif self.position < len(self._script):
            proposal = self._script[self.position]
        else:
            return None
        if proposal is not None:
            self.position += 1
        return proposal

    def snapshot(self) -> dict[str, JSON]:
        return {"kind": "scripted", "position": self.position}

    def refused(self) -> None:
        """A script keeps its proposals (they are the test's, not stored with the run)."""

    def notes(self) -> list[dict[str, JSON]]:
        return []
