"""Which channels an event asks to record something: found once per type where no
event of the type ever interests a channel (most of a step's), and asked of each
event where it depends on the event (a lapse's status, a grant's quorum), whichever
event of the type comes first."""

from __future__ import annotations

from typing import Any

import pytest

from core import events as ev
from notifications import signals
from notifications.channels import CHANNELS

AT = {"run_id": "r", "seq": 1, "ts": 1.0}


def lapsed(status: Any) -> ev.ApprovalLapsed:
    return ev.ApprovalLapsed(**AT, request_id="q", status=status, reason="")


def decided(decision: Any, grants: int, needed: int) -> ev.ApprovalDecided:
    return ev.ApprovalDecided(**AT, request_id="q", decision=decision, by="u", reason="", grants=grants, needed=needed)


CASES: list[tuple[ev.AnyEvent, list[str]]] = [
    (lapsed("stale"), []),
    (lapsed("cancelled"), ["email"]),
    (lapsed("expired"), ["webhooks", "email"]),
    (decided("granted", 1, 2), []),
    (decided("granted", 2, 2), ["email"]),
    (decided("denied", 1, 2), ["email"]),
    (ev.Stopped(**AT, status="complete", message=""), ["webhooks"]),
]


@pytest.mark.parametrize("order", [1, -1], ids=["uninterested first", "interested first"])
def test_it_asks_of_each_event_where_its_type_alone_does_not_tell(monkeypatch: pytest.MonkeyPatch, order: int) -> None:
    monkeypatch.setattr(signals, "_ASKED", {})
    for event, names in CASES[::order]:
        assert [channel.name for channel in signals._interested(event)] == names, event
        assert signals._records(event) is bool(names), event


def test_it_asks_no_channel_again_of_a_type_none_cares_about(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signals, "_ASKED", {})
    ended = ev.WaitEnded(**AT, request_id="q", exit="granted", run="running", reason="", waited_seconds=1.0, total_waited_seconds=1.0)
    assert not signals._records(ended)

    def asked(event: ev.AnyEvent) -> Any:
        raise AssertionError(f"asked of {event.type} again")

    for channel in CHANNELS:
        monkeypatch.setattr(channel, "interest", asked)
    assert not signals._records(ended)
    assert signals._interested(ended) == []
    signals.on_events(sender=None, rows=[], events=[ended])  # type: ignore[arg-type]
