"""What the pages say, below the browser: the trace in seq order, the reader's words
for events, statuses and times, and the reviewer's line for each effectful tool."""

from __future__ import annotations

from typing import Any

from common.times import when
from core.tools import BUILTIN_TOOLS
from live.trace import group_cards, present
from live.wording import LABELS, duration, human


def step(seq: int, type_: str, call_id: str | None, **payload: Any) -> dict[str, Any]:
    return present(
        {
            "run_id": "00000000-0000-0000-0000-000000000001",
            "seq": seq,
            "ts": "2026-11-30T18:19:27+00:00",
            "type": type_,
            "call_id": call_id,
            "payload": payload,
        }
    )


def test_it_keeps_the_trace_in_seq_order_when_a_call_is_interrupted() -> None:
    events = [
        step(1, "proposed", "c1", number=1, proposal={"tool": "run_check", "args": {"check_id": "slow"}}),
        step(2, "call_started", "c1", attempt=1, tool="run_check", idempotency_key=None),
        step(3, "kill_requested", None, by="otto", scope="run"),
        step(4, "stopped", "c1", status="killed", message="killed by otto"),
    ]
    items = group_cards(events)
    assert [[e["seq"] for e in item["events"]] for item in items] == [[1, 2], [3], [4]]
    assert [item.get("continued") for item in items] == [False, None, True]
    assert items[2]["tool"] == "run_check"
    assert items[1]["events"][0]["view"]["summary"] == "by otto for this run"
    assert items[2]["events"][0]["view"]["label"] == "Stopped: killed"


def test_it_shows_long_string_arguments_as_text_beside_the_json() -> None:
    view = step(1, "proposed", "c1", number=1, proposal={"tool": "publish", "args": {"message": "Fix totals\n\nReject negatives", "n": 1}})[
        "view"
    ]
    assert view["text_args"] == [{"name": "message", "text": "Fix totals\n\nReject negatives"}]
    assert view["args"] == {"message": "Fix totals\n\nReject negatives", "n": 1}


def test_it_words_statuses_for_people_and_keeps_unknown_ids_readable() -> None:
    assert human("waiting_approval") == "waiting for approval"
    assert human("proposals_exhausted") == "out of proposals"
    assert human("consumed") == "granted and used"
    assert human("some_new_reason") == "some new reason"


def test_it_describes_waits_and_self_approval_in_words() -> None:
    # Every event type has its words: tests/test_event_types.py.
    ended = step(
        2,
        "wait_ended",
        "c4",
        request_id="00000000-0000-0000-0000-00000000000a",
        exit="stale",
        run="running",
        reason="the workspace moved",
        waited_seconds=185.2,
        total_waited_seconds=185.2,
    )
    assert ended["view"]["label"] == "Wait over: out of date"
    assert ended["view"]["summary"] == "after 3m 05s waiting; the run continues: the workspace moved"
    alone = step(
        3,
        "approval_decided",
        "c4",
        request_id="00000000-0000-0000-0000-00000000000a",
        decision="granted",
        by="ada",
        reason="ok",
        self_approved=True,
    )["view"]
    assert alone["label"] == "Granted by ada" and alone["tone"] == "warn" and "self-approved" in alone["summary"]


def test_it_says_a_denials_reason_once_where_it_was_decided() -> None:
    request = "00000000-0000-0000-0000-00000000000a"
    reason = "not this week, the freeze is on"
    events = [
        step(5, "approval_decided", None, request_id=request, decision="denied", by="rita", reason=reason),
        step(
            6,
            "wait_ended",
            "c4",
            request_id=request,
            exit="denied",
            run="stopped",
            reason=reason,
            waited_seconds=12,
            total_waited_seconds=12,
        ),
        step(7, "approval_refused", "c4", key="k", request_id=request, reason=reason),
        step(8, "stopped", "c4", status="denied", message=f"approval denied: {reason}"),
    ]
    summaries = [e["view"]["summary"] for e in events]
    assert [reason in summary for summary in summaries] == [True, False, False, False], summaries
    assert summaries[1] == "after 12s waiting; the run stops (the reason is in the reviewer's decision)"
    assert summaries[3] == "approval denied (the reason is in the reviewer's decision)"
    # An expiry's reason is its lapse's; another stop keeps its own words.
    lapsed = step(9, "stopped", "c4", status="approval_expired", message="approval expired: no decision before the deadline")
    assert lapsed["view"]["summary"] == "approval expired (the reason is in the request's lapse)"
    assert step(10, "stopped", "c4", status="killed", message="killed by otto")["view"]["summary"] == "killed by otto"


def test_it_words_the_stop_reasons_and_request_statuses_of_issues_11_and_20() -> None:
    for raw in ("approval_expired", "approval_cancelled", "sandbox_unavailable", "workspace_error", "revision_mismatch", "cancelled"):
        assert raw in LABELS, raw
    assert duration(42.7) == "42s" and duration(185) == "3m 05s" and duration(7440) == "2h 04m"


def test_it_tells_the_reviewer_what_each_effectful_tool_does() -> None:
    effectful = [spec for spec in BUILTIN_TOOLS if spec.has_effect]
    assert {spec.name for spec in effectful} >= {"publish", "write_file", "apply_patch"}
    for spec in effectful:
        assert spec.reviewer_summary.strip(), spec.name


def test_it_writes_times_for_the_viewers_zone_and_never_zero_minutes_ago() -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    assert ">just now</time>" in when(now - timedelta(seconds=20), "ago")
    assert ">3 min ago</time>" in when(now - timedelta(minutes=3, seconds=5), "ago")
    full = when(datetime(2026, 11, 30, 18, 19, 27, tzinfo=UTC))
    assert 'data-when="full"' in full and ">2026-11-30 18:19:27 UTC</time>" in full and 'title="2026-11-30 18:19:27 UTC"' in full


def test_it_links_no_empty_output() -> None:
    from live.trace import EMPTY_OUTPUT_REF

    view = step(
        5,
        "receipt_recorded",
        "c2",
        tool="run_check",
        attempt=1,
        harness_revision="r",
        valid=True,
        receipt={
            "status": "ok",
            "effect": "none",
            "revision": "r",
            "data": {"output_ref": EMPTY_OUTPUT_REF},
            "artifacts": [EMPTY_OUTPUT_REF],
        },
    )["view"]
    assert view["links"] == []


def test_it_does_not_show_a_failing_checks_receipt_as_a_success() -> None:
    receipt = {"status": "ok", "effect": "none", "revision": "abcdef123456", "data": {"exit_code": 1}}
    shown = step(5, "receipt_recorded", "c1", tool="run_check", attempt=1, valid=True, receipt=receipt, harness_revision="x")
    assert shown["view"]["label"] == "Receipt: the check ran" and shown["view"]["tone"] == "info"
    assert "exit 1" in shown["view"]["summary"]
    write = {"status": "ok", "effect": "workspace", "revision": "abcdef123456", "data": {}}
    shown = step(7, "receipt_recorded", "c2", tool="write_file", attempt=1, valid=True, receipt=write, harness_revision="x")
    assert shown["view"]["label"] == "Receipt ok" and shown["view"]["tone"] == "ok"
