"""The run row's state text is dumped and scanned for secrets in two parts
(runs.persistence.store.StateText): its head, the fields set when the run is created
and started, once while the state holds the same objects and secrets; the rest at
every checkpoint. The text stored is exactly the whole dump masked, whatever changes
between checkpoints: the secrets, the head, the run."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.test import override_settings

import core.scenarios as scenarios
import runs.persistence.store as store
from common.redact import MaskedHead, masked_text, secret_values
from core.contract import Limits
from core.events import Event
from core.scenarios import build_rig, call, demo_contract
from core.simulated import MemoryStore
from core.state import RunState
from runs.persistence.store import StateText

SECRET = "head-secret-5c2e81f0aa"


def whole(state: RunState) -> str:
    """What the store wrote before the head was kept: the whole dump, masked."""
    return masked_text(state.model_dump_json(), secret_values()).text


class CheckingStore(MemoryStore):
    """Compares, at each checkpoint of a run, the state text with the whole dump masked."""

    def __init__(self) -> None:
        super().__init__()
        self.state_text = StateText()
        self.texts: list[str] = []

    def checkpoint(self, state: RunState, events: Sequence[Event]) -> None:
        text = self.state_text(state).text
        assert text == whole(state)
        self.texts.append(text)
        super().checkpoint(state, events)


@pytest.fixture
def heads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The heads StateText dumped, in order."""
    made: list[str] = []

    class Counted(MaskedHead):
        __slots__ = ()

        def __init__(self, head: str) -> None:
            made.append(head)
            super().__init__(head)

    monkeypatch.setattr(store, "MaskedHead", Counted)
    return made


@pytest.mark.parametrize("secrets", [[], [SECRET]], ids=["no secrets", "a secret in the head"])
def test_it_stores_at_each_checkpoint_the_whole_dump_masked(secrets: list[str], heads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "MemoryStore", CheckingStore)
    script = [
        call("read_file", path="src/calc.py"),
        call("write_file", path="src/calc.py", content="x = 1\n"),
        call("read_file", path="src/calc.py"),
    ]
    rig = build_rig(script, contract=demo_contract().model_copy(update={"objective": f"use {SECRET} carefully"}))
    with override_settings(HARNESS_SECRET_VALUES=secrets):
        rig.harness.run()
    texts = rig.store.texts  # type: ignore[attr-defined]  # a CheckingStore
    assert len(texts) >= 6
    # Dumped once for the whole run.
    assert len(heads) == 1
    assert all((SECRET in text) is not bool(secrets) for text in texts)


def test_it_scans_the_head_again_when_the_secrets_change() -> None:
    state = build_rig([], contract=demo_contract().model_copy(update={"objective": f"use {SECRET} carefully"})).state
    state_text = StateText()
    for secrets in ([], [SECRET], [], [SECRET, "another-secret-value"], [SECRET]):
        with override_settings(HARNESS_SECRET_VALUES=secrets):
            text = state_text(state).text
            assert text == whole(state)
        assert (SECRET in text) is not bool(secrets)


@override_settings(HARNESS_SECRET_VALUES=[SECRET])
def test_it_dumps_the_head_again_for_another_run_contract_or_limits(heads: list[str]) -> None:
    first = build_rig([]).state
    other_run = first.model_copy(update={"run_id": "run-other"})
    other_contract = first.model_copy(update={"contract": demo_contract().model_copy(update={"objective": f"é {SECRET}"})})
    other_limits = first.model_copy(update={"limits": Limits.model_validate(first.limits.model_dump() | {"max_proposals": 3})})
    state_text = StateText()
    for state in (first, first, other_run, first, other_contract, other_limits, first):
        assert state_text(state).text == whole(state)
    assert len(heads) == 6
    assert SECRET not in state_text(other_contract).text
