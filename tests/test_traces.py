"""Traces of runs over OTLP/HTTP: a receiver on loopback decodes what Harness sends
with the protocol's own messages (opentelemetry-proto); a run with a refused call,
a check and a wait for a reviewer makes the expected span tree, and no planted
secret reaches any span."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan

from approvals.models import ApprovalRequest
from core.scenarios import FIXED, call
from ledger.models import Entry
from monitoring import tracing
from monitoring.spans import Recent, Written, span_id_of, spans_for, trace_id_text
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event
from runs.persistence.signals import events_stored
from runs.services import drive_run
from tests.helpers import World, new_policy_version

SECRET = "planted-trace-secret-7d1e93ab"


class Receiver:
    """An OTLP/HTTP traces endpoint: POST /v1/traces, protobuf in, protobuf out."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = 200 if self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf" else 400
                if status == 200:
                    received.append(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[Span]:
        spans = []
        for body in self.requests:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
                assert attributes["service.name"] == "harness"
                spans += [span for scope in resource.scope_spans for span in scope.spans]
        return spans

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """The receiver, and this process's exporter sending to it (made anew, shut down after)."""
    receiver = Receiver()
    tracing.reset()
    try:
        with override_settings(HARNESS_TRACES_URL=receiver.url, HARNESS_TRACES_DELAY_MS=10, HARNESS_SECRET_VALUES=[SECRET]):
            yield receiver
            tracing.reset()
    finally:
        receiver.close()


def value(v: AnyValue) -> object:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes(item: Any) -> dict[str, object]:
    return {a.key: value(a.value) for a in item.attributes}


def traced_run(reviewer: User, operator: User) -> str:
    """A run that proposes publish before any check (refused: check_required), runs
    the check, waits for a reviewer to grant its publish, and finishes."""
    new_policy_version(trace_values=True)
    world = World()
    script = [
        call("read_file", path="src/calc.py"),
        call("write_file", path="src/calc.py", content=f"{FIXED}\n# deploy token {SECRET}\n"),
        call("publish", message=f"reject negative quantities ({SECRET})"),
        call("run_check", check_id="tests"),
        call("publish", message=f"reject negative quantities ({SECRET})"),
        call("finish", summary="fixed"),
    ]
    run = world.create(actor=operator, script=script)
    state = drive_run(run, world.environment(), DjangoApprovals(run))
    assert state.status == "waiting_approval", state.outcome
    time.sleep(1)
    grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
    run.refresh_from_db()
    state = drive_run(run, world.environment(), DjangoApprovals(run))
    assert state.status == "complete", state.outcome
    assert tracing.flush()
    return str(run.pk)


def test_it_sends_a_span_tree_of_the_run_its_calls_check_and_wait_without_the_secret(
    transactional_db: None, receiver: Receiver, reviewer: User, operator: User
) -> None:
    run_id = traced_run(reviewer, operator)
    spans = receiver.spans()
    assert spans and {span.trace_id.hex() for span in spans} == {trace_id_text(run_id)}
    by_id = {span.span_id: span for span in spans}
    assert len(by_id) == len(spans), "a span was sent twice"
    [root] = [span for span in spans if not span.parent_span_id]
    assert root.name == "invoke_agent calc-fix"
    assert attributes(root)["gen_ai.operation.name"] == "invoke_agent" and attributes(root)["harness.outcome"] == "complete"

    def children(parent: Span) -> list[Span]:
        return sorted((s for s in spans if s.parent_span_id == parent.span_id), key=lambda s: s.start_time_unix_nano)

    calls = children(root)
    assert [s.name for s in calls] == [
        "execute_tool read_file",
        "execute_tool write_file",
        "execute_tool publish",
        "execute_tool run_check",
        "execute_tool publish",
        "execute_tool finish",
    ]
    for span in calls:
        assert attributes(span)["gen_ai.operation.name"] == "execute_tool"
        assert span.start_time_unix_nano <= span.end_time_unix_nano
        assert root.start_time_unix_nano <= span.start_time_unix_nano and span.end_time_unix_nano <= root.end_time_unix_nano
    read, write, refused, check, publish, finish = calls

    # The refused publish never ran; its span says which decision refused it.
    assert attributes(refused)["harness.call.executed"] is False
    assert [(e.name, attributes(e)["harness.decision"]) for e in refused.events] == [("harness.gate.decision", "check_required")]
    assert children(refused) == []

    # The check, a child of its call.
    [check_span] = children(check)
    assert check_span.name == "check tests" and attributes(check_span)["harness.check.passed"] is True

    # The publish asked (rule, policy version, key), waited, was granted by the reviewer, ran.
    decisions = [(e.name, attributes(e)) for e in publish.events]
    ask = next(a for name, a in decisions if a.get("harness.decision") == "ask")
    assert ask["harness.rule"] and ask["harness.policy.version"] and ask["harness.approval.key"]
    assert ("harness.approval.decision", "rita-reviewer") in [(name, a.get("harness.approval.by")) for name, a in decisions]
    assert any(a.get("harness.decision") == "admitted" for _, a in decisions)
    assert attributes(publish)["harness.call.executed"] is True
    [wait] = children(publish)
    wait_attributes = attributes(wait)
    assert wait.name == "wait for reviewer" and wait_attributes["harness.approval.granted_by"] == ["rita-reviewer"]
    assert wait_attributes["harness.approval.key"] == ask["harness.approval.key"]
    assert (wait.end_time_unix_nano - wait.start_time_unix_nano) / 1e9 >= 1

    # The policy lets values into this trace: the arguments are there, masked.
    arguments = str(attributes(write)["gen_ai.tool.call.arguments"])
    assert "src/calc.py" in arguments and "deploy token" in arguments
    assert attributes(finish)["harness.call.ended_by"] == "stopped"

    # Each decision, refusals included, as its ledger entry names it: kind, outcome,
    # decider, rule, policy version and the digest of what the decider was shown.
    refusal = attributes(refused.events[0])
    assert (refusal["harness.decision.kind"], refusal["harness.decision.outcome"]) == ("gate.refused", "refused")
    assert (refusal["harness.decider.kind"], refusal["harness.decider.name"], refusal["harness.decision.rule"]) == (
        "rule",
        "evidence",
        "evidence",
    )
    assert refusal["gen_ai.tool.name"] == "publish" and refusal["gen_ai.tool.call.id"]
    assert (
        ask["harness.decision.kind"] == "gate.asked"
        and ask["harness.decider.kind"] == "rule"
        and ask["harness.decision.rule"] == ask["harness.rule"]
    )
    [granted] = [a for name, a in decisions if name == "harness.approval.decision"]
    assert (granted["harness.decision.kind"], granted["harness.decider.kind"], granted["harness.decider.name"]) == (
        "approval.granted",
        "user",
        "rita-reviewer",
    )
    told = [
        (a["harness.decision.kind"], a["harness.decider.name"], a["harness.decision.shown"])
        for span in calls
        for a in map(attributes, span.events)
        if "harness.decision.kind" in a
    ]
    assert {"gate.allowed", "gate.asked", "gate.refused", "approval.granted", "approval.consumed"} <= {kind for kind, _, _ in told}
    entries = set(Entry.objects.filter(run_id=run_id).values_list("kind", "actor", "shown"))
    assert set(told) <= entries, set(told) - entries
    assert read.start_time_unix_nano < write.start_time_unix_nano
    for body in receiver.requests:
        assert SECRET.encode() not in body


def test_it_makes_a_steps_spans_from_what_it_saw_stored_as_from_the_log_and_reads_the_log_after_a_gap(
    transactional_db: None, reviewer: User, operator: User
) -> None:
    run_id = traced_run(reviewer, operator)
    rows = list(Event.objects.filter(run_id=run_id).order_by("seq"))
    resource = Resource.create({"service.name": "harness"})

    def encoded(spans: list[ReadableSpan]) -> bytes:
        body: bytes = encode_spans(spans).SerializeToString()
        return body

    def made(rows: list[Event], recent: Recent) -> list[ReadableSpan]:
        return [span for row in rows for span in spans_for([row], resource, recent=recent)]

    def reads_of_a_call(queries: CaptureQueriesContext) -> list[str]:
        return [query["sql"] for query in queries.captured_queries if '"seq" <=' in query["sql"]]

    # Each row seen by a process that saw nothing before it: every call's span is
    # made from the call's rows read back.
    with CaptureQueriesContext(connection) as read_back:
        from_log = [span for row in rows for span in spans_for([row], resource, recent=Recent())]
    calls = [span for span in from_log if span.name.startswith("execute_tool")]
    assert len(calls) == 6 and len(reads_of_a_call(read_back)) >= len(calls)

    # Every row seen in order, as the process that wrote them sees them: the same
    # spans, and no call's rows read back.
    with CaptureQueriesContext(connection) as seen:
        assert encoded(made(rows, Recent())) == encoded(from_log)
    assert reads_of_a_call(seen) == []

    # A row this process did not see (the reviewer's decision, written by the web
    # server): the call it belongs to is read from the log, and its span still tells it.
    decided = next(n for n, row in enumerate(rows) if row.type == "approval_decided")
    with CaptureQueriesContext(connection) as gap:
        assert encoded(made(rows[:decided] + rows[decided + 1 :], Recent())) == encoded(from_log)
    assert len(reads_of_a_call(gap)) == 1


def test_it_sends_from_what_the_writer_knew_the_spans_the_log_gives(
    transactional_db: None, receiver: Receiver, reviewer: User, operator: User
) -> None:
    """The spans sent as the run was driven were made from what the event writer held
    (the events it stored, their decisions, the secrets it masked with): byte for byte
    the spans its log gives afterwards, the rows the planted secret was masked in too."""
    run_id = traced_run(reviewer, operator)
    rows = list(Event.objects.filter(run_id=run_id).order_by("seq"))
    assert any(SECRET not in str(row.payload) and "[redacted" in str(row.payload) for row in rows), "no row had a secret masked"
    from_log = [span for row in rows for span in spans_for([row], Resource.create({"service.name": "harness"}), recent=Recent())]
    request = ExportTraceServiceRequest()
    request.ParseFromString(encode_spans(from_log).SerializeToString())
    expected = {s.span_id: s.SerializeToString() for r in request.resource_spans for scope in r.scope_spans for s in scope.spans}
    sent = {span.span_id: span.SerializeToString() for span in receiver.spans()}
    assert sent == expected


def test_it_masks_a_span_again_when_a_secret_appeared_after_its_rows_were_stored(
    transactional_db: None, reviewer: User, operator: User
) -> None:
    """Spans from what the writer knew skip masking again only while the secrets are
    the ones the rows were masked with: one learnt since is masked in them too."""
    kept: list[tuple[list[Event], Written]] = []

    def keep(sender: type[Event], rows: list[Event], events: list[Any], **known: Any) -> None:
        kept.append((rows, Written(events, known["as_given"], known["secrets"], known["decisions"])))

    events_stored.connect(keep, sender=Event, dispatch_uid="test_traces.keep")
    try:
        with override_settings(HARNESS_SECRET_VALUES=[SECRET]):
            traced_run(reviewer, operator)
    finally:
        events_stored.disconnect(sender=Event, dispatch_uid="test_traces.keep")
    resource = Resource.create({"service.name": "harness"})
    learnt = "reject negative quantities"
    for secrets, shown in (([SECRET], True), ([SECRET, learnt], False)):
        recent = Recent()
        with override_settings(HARNESS_SECRET_VALUES=secrets):
            spans = [span for rows, written in kept for span in spans_for(rows, resource, recent=recent, writer=written)]
        [arguments] = [
            str(span.attributes["gen_ai.tool.call.arguments"])
            for span in spans
            if span.name == "execute_tool publish" and span.attributes and "gen_ai.tool.call.arguments" in span.attributes
        ]
        assert (learnt in arguments) is shown and SECRET not in arguments, (secrets, arguments)


def test_it_leaves_argument_values_out_unless_the_policy_lets_them_in(transactional_db: None, receiver: Receiver, operator: User) -> None:
    world = World()
    run = world.create(
        actor=operator, script=[call("read_file", path="src/calc.py"), call("write_file", path="src/calc.py", content="x = 1\n")]
    )
    drive_run(run, world.environment(), DjangoApprovals(run))
    assert tracing.flush()
    spans = receiver.spans()
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert tools
    for span in tools:
        assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(attributes(span))
    assert b"x = 1" not in b"".join(receiver.requests)


def test_it_sends_nothing_when_no_traces_url_is_set(transactional_db: None, operator: User) -> None:
    tracing.reset()
    world = World()
    run = world.create(actor=operator, script=[call("read_file", path="src/calc.py")])
    drive_run(run, world.environment(), DjangoApprovals(run))
    assert tracing._exporting is None


def test_it_shows_the_trace_id_on_the_run_page_when_tracing_is_on(client: Client, operator: User, receiver: Receiver) -> None:
    run = World().create(actor=operator)
    client.force_login(operator)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<span class="mono" id="trace-id">{run.pk.hex}</span>' in page
    with override_settings(HARNESS_TRACES_URL=""):
        assert 'id="trace-id"' not in client.get(f"/runs/{run.pk}/").content.decode()


def test_it_lets_a_policy_admin_turn_values_in_traces_on_and_off(client: Client, admin_user: User) -> None:
    from approvals.policies import current_policy_row
    from tests.test_policy_admin import ADD, inline_form

    client.force_login(admin_user)
    for on in (True, False):
        data = inline_form(client)
        data.pop("trace_values", None)
        if on:
            data["trace_values"] = "on"
        assert client.post(ADD, {**data, "note": f"values {on}"}).status_code == 302
        assert current_policy_row().document.get("trace_values", False) is on
        assert (re.search(r'name="trace_values"[^>]*\bchecked', client.get(ADD).content.decode()) is not None) is on


def test_it_sends_a_model_request_as_a_chat_span_of_the_run(transactional_db: None, receiver: Receiver, operator: User) -> None:
    from tests.overview_scene import usage

    world = World()
    run = world.create(actor=operator, script=[call("read_file", path="src/calc.py")])
    usage(run, "gpt-test", 0.25)
    usage(run, "gpt-later", 0.5)
    assert tracing.flush()
    [chat] = [span for span in receiver.spans() if span.name == "chat gpt-test"]
    assert chat.trace_id.hex() == trace_id_text(str(run.pk)) and chat.kind == Span.SPAN_KIND_CLIENT
    # The run has not ended, so its own span is not sent yet; the request names it all the same.
    assert int.from_bytes(chat.parent_span_id, "big") == span_id_of(str(run.pk), "run")
    # A request begins with the run's previous event (here, which this process saw stored).
    [later] = [span for span in receiver.spans() if span.name == "chat gpt-later"]
    first = Event.objects.filter(run=run).order_by("seq").values_list("ts", flat=True).first()
    assert first is not None and later.start_time_unix_nano == int(first.timestamp() * 1e9) == chat.end_time_unix_nano
    values = attributes(chat)
    assert values["gen_ai.operation.name"] == "chat" and values["gen_ai.request.model"] == "gpt-test"
    assert (
        values["gen_ai.usage.input_tokens"] == 1200 and values["gen_ai.usage.output_tokens"] == 300 and values["harness.cost_usd"] == 0.25
    )
