"""Values no database takes never wedge a run (docs/design.md, Recovery): a proposal
nested too deep, holding a NUL or a lone surrogate, or of several megabytes is refused
at the parse gate and fed back naming the problem, and kept only as a bounded summary;
tool output with such text (a file name that is not UTF-8) is stored escaped; a
checkpoint that fails anyway stops the run saying why instead of driving it again; and
the API refuses such input with a 400 naming the field and can list every run."""

from __future__ import annotations

import base64
import json
import os
import random
import time
from collections.abc import Mapping
from typing import Any, cast

import pytest
from django.contrib.auth.models import User
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.models import ApprovalRequest
from core.environment import Environment
from core.feedback import Feedback
from core.jsonutil import JSON, digest
from core.ports import Call, Executor, Reconciliation
from core.scenarios import call
from core.scripted import ScriptedProposer
from core.state import PendingEffect, RunState
from core.storable import HEAD_CHARS, MAX_DEPTH
from runs import runtime
from runs import services as run_services
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Event, Receipt, Report, Run
from runs.persistence.artifacts import ArtifactStorage
from runs.persistence.store import load_state
from runs.services import check_new_run, do_create_run, drive_run
from sandbox.executor import SandboxExecutor
from tests.fake_providers import (
    API_KEY,
    FakeAnthropic,
    FakeOpenAI,
    FakeProvider,
    anthropic_text,
    anthropic_tools,
    openai_text,
    openai_tools,
)
from tests.fixtures_sandbox import ALL_TOOLS, WRITE_PATHS
from tests.helpers import CONTRACT, World
from tests.test_api import SMALL_CONTRACT, client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def nested(depth: int, leaf: object = "x") -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


READ = call("read_file", path="src/calc.py")
HOSTILE = {
    "nested 250 deep (pydantic's circular reference)": call("read_file", path="src/calc.py", extra=nested(250)),
    "nested 5,000 deep (RecursionError)": call("write_file", path="src/calc.py", content=nested(5000)),
    "a lone surrogate": call("read_file", path="src/caf\udce9.py"),
    "a NUL": call("read_file", path="src/\x00.py"),
    "a surrogate in a key": {"tool": "read_file", "args": {"path": "src/calc.py", "\udce9": 1}},
}


def drive_with(run: Run, world: World, proposals: list[object], executor: Executor | None = None) -> RunState:
    """The run driven by a model that proposes ``proposals`` (not stored in the run:
    it is the model's output, as a real adapter's would be)."""
    environment = Environment(executor or world.executor, world.workspace)
    return drive_run(run, environment, DjangoApprovals(run), proposer=ScriptedProposer(proposals))


def api_reads_back(run: Run, user: User) -> None:
    """Every value stored for the run comes back through the API (and the list of
    all runs still answers, for everyone)."""
    client = client_for(user)
    for path in ("/api/runs/", f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/events/?limit=500", f"/api/runs/{run.pk}/report/"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.content[:300])
        json.loads(response.content)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_it_feeds_an_unstorable_proposal_back_naming_it_and_goes_on(name: str, operator: User) -> None:
    world = World()
    run = world.create(script=[])
    state = drive_with(run, world, [HOSTILE[name], READ])
    assert state.outcome == "proposals_exhausted", (state.outcome, state.stop_message)
    assert state.proposals == 2
    assert [c.tool for c in world.executor.calls] == ["read_file"]  # the next proposal ran
    (invalid,) = Event.objects.filter(run=run, type="invalid_input")
    assert invalid.payload["gate"] == "parse"
    problem = invalid.payload["problems"][0]
    assert problem["field"].startswith("args"), problem
    assert any(word in problem["message"] for word in ("nested more than", "NUL", "lone surrogate")), problem
    (proposed, _) = Event.objects.filter(run=run, type="proposed").order_by("seq")
    assert proposed.payload["proposal"] is None and proposed.payload["summary"]["bytes"] > 0
    run.refresh_from_db()
    assert load_state(run).status == "stopped"
    api_reads_back(run, operator)


def stored_bytes(run: Run) -> int:
    """Everything stored for the run as its rows' text: the run row, its events,
    receipts, report and approval requests."""
    rows: list[Mapping[str, object]] = [Run.objects.filter(pk=run.pk).values().get()]
    for model in (Event, Receipt, Report, ApprovalRequest):
        rows += list(model.objects.filter(run=run).values())
    return sum(len(json.dumps(row, default=str, ensure_ascii=False).encode()) for row in rows)


@pytest.mark.parametrize(
    "proposal",
    [
        {"tool": "write_file", "args": {"path": "/etc/passwd", "content": "A" * 5_000_000}},  # refused at validate
        {"tool": "teleport", "args": {"payload": "B" * 5_000_000}},  # refused at resolve
        {"tool": "read_file", "args": {"path": "src/calc.py"}, "extra": "C" * 5_000_000},  # refused at parse
        {"tool": "publish", "args": {"message": "D" * 5_000_000}},  # a tool the contract allows, refused at validate
    ],
    ids=["validate", "resolve", "parse", "too-long-field"],
)
def test_it_stores_a_refused_multi_megabyte_proposal_bounded(proposal: dict[str, Any], operator: User) -> None:
    world = World()
    run = world.create(script=[])
    empty = stored_bytes(run)
    state = drive_with(run, world, [proposal, READ])
    assert state.proposals == 2 and [c.tool for c in world.executor.calls] == ["read_file"]
    grew = stored_bytes(run) - empty
    assert grew < 40_000, f"{grew} bytes stored for a refused proposal of {len(json.dumps(proposal))}"
    proposed = Event.objects.filter(run=run, type="proposed").order_by("seq").first()
    assert proposed is not None
    summary = proposed.payload["summary"]
    assert summary["sha256"] == digest(proposal) and summary["bytes"] == len(json.dumps(proposal, separators=(",", ":")))
    assert len(summary["head"]) == HEAD_CHARS
    api_reads_back(run, operator)


def database_bytes() -> int:
    """How much of the database is taken: SQLite's pages in use (the file keeps the
    pages an earlier test freed, and reuses them), PostgreSQL's database (dead row
    versions included, until a vacuum: what a checkpoint wrote and the next replaced)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT (SELECT page_count FROM pragma_page_count()) - (SELECT freelist_count FROM pragma_freelist_count())")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            return int(pages * cursor.fetchone()[0])
        cursor.execute("SELECT pg_database_size(current_database())")
        return int(cursor.fetchone()[0])


SIX_MB = 6_000_000
# What the run keeps of a refused answer is a summary (HEAD_CHARS, a digest and a size)
# in its events and the proposer's state; the rest of the step's rows are a few KB.
# The database is measured in pages (4 KB on SQLite, 8 KB on PostgreSQL; more for the
# indexes a row touches): 1 MB is 1/6 of the refused answer, which stored whole once is 6 MB.
BOUND_BYTES = 1_000_000


@pytest.mark.parametrize("kind", ["openai", "anthropic", "openai text", "anthropic text"])
def test_it_stores_a_refused_6_mb_model_answer_as_a_head_and_a_digest(kind: str, settings: Any, operator: User) -> None:
    # Refused at validate (not a writable path), or text with no tool call (refused at
    # parse); text no database compresses away.
    big = {"path": "/etc/passwd", "content": base64.b64encode(random.Random(39).randbytes(SIX_MB * 3 // 4)).decode()}
    read = {"path": "src/calc.py"}
    text = kind.endswith(" text")
    if kind.startswith("openai"):
        first = openai_text(big["content"]) if text else openai_tools(("call_1", "write_file", big))
        fake: FakeProvider = FakeOpenAI([first, openai_tools(("call_2", "read_file", read))])
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_ALLOWED_BASE_URLS = [fake.base_url]  # type: ignore[attr-defined]
        model = {"kind": "openai", "model": "gpt-4o-mini", "base_url": fake.base_url}  # type: ignore[attr-defined]
    else:
        start = anthropic_text(big["content"]) if text else anthropic_tools(("toolu_1", "write_file", big))
        fake = FakeAnthropic([start, anthropic_tools(("toolu_2", "read_file", read))])
        settings.ANTHROPIC_API_KEY = API_KEY
        settings.ANTHROPIC_ALLOWED_BASE_URLS = [fake.base_url]
        model = {"kind": "anthropic", "model": "claude-sonnet-4-6", "base_url": fake.base_url}
    world = World()
    two = {**CONTRACT, "limits": {**CONTRACT["limits"], "max_proposals": 2}}  # type: ignore[dict-item]
    run = do_create_run(check_new_run(two, model), operator, lambda run: world.workspace.revision())
    rows, size = stored_bytes(run), database_bytes()
    with fake:
        state = drive_run(run, world.environment(), DjangoApprovals(run))
    assert state.proposals == 2 and [c.tool for c in world.executor.calls] == ["read_file"]
    grew_rows, grew_db = stored_bytes(run) - rows, database_bytes() - size
    print(f"{connection.vendor} {kind}: a refused answer of {SIX_MB} bytes: rows +{grew_rows} bytes, database +{grew_db} bytes")
    assert grew_rows < 40_000, f"{grew_rows} bytes of rows stored for a refused answer of {SIX_MB} bytes"
    assert grew_db < BOUND_BYTES, f"the database grew by {grew_db} bytes for a refused answer of {SIX_MB} bytes"
    summary = Event.objects.get(run=run, type="proposed", payload__accepted=False).payload["summary"]
    assert summary["bytes"] > SIX_MB and len(summary["head"]) == HEAD_CHARS


def test_it_keeps_a_small_refused_proposal_whole() -> None:
    world = World()
    run = world.create(script=[])
    drive_with(run, world, [call("read_file", path="/etc/passwd"), READ])
    proposed = Event.objects.filter(run=run, type="proposed").order_by("seq").first()
    assert proposed is not None
    assert proposed.payload["proposal"] == call("read_file", path="/etc/passwd")
    assert proposed.payload["summary"] is None


class Hostile:
    """An executor whose read_file returns ``data`` as the tool's output."""

    def __init__(self, world: World, data: object) -> None:
        self.world, self.data = world, data

    def execute(self, c: Call) -> object:
        receipt = self.world.executor.execute(c)
        if c.tool == "read_file":
            receipt = {**cast(dict[str, object], receipt), "data": {"text": self.data}}  # the simulated receipt is an object
        return receipt

    def reconcile(self, effect: PendingEffect) -> Reconciliation:
        return self.world.executor.reconcile(effect)


def test_it_stores_tool_output_with_a_nul_or_a_surrogate_escaped(operator: User) -> None:
    world = World()
    run = world.create(script=[])
    state = drive_with(run, world, [READ], Hostile(world, "caf\udce9 \x00 \ud800"))
    assert state.outcome == "proposals_exhausted"
    (receipt,) = Receipt.objects.filter(run=run)
    assert receipt.valid and receipt.body["data"]["text"] == "caf\\xe9 \\x00 \\ud800"
    api_reads_back(run, operator)


def test_it_stores_large_tool_output_once_in_an_artifact_and_the_receipt_bounded(operator: User) -> None:
    world = World()
    run = world.create(script=[])
    empty = stored_bytes(run)
    state = drive_with(run, world, [READ], Hostile(world, "E" * 3_000_000))
    assert state.outcome == "proposals_exhausted"
    assert stored_bytes(run) - empty < 40_000
    (receipt,) = Receipt.objects.filter(run=run)
    data = receipt.body["data"]
    assert data["truncated"] is True and data["size"] > 3_000_000
    assert ArtifactStorage().get(data["artifact"]) == json.dumps({"text": "E" * 3_000_000}, separators=(",", ":")).encode()
    api_reads_back(run, operator)


def test_it_stops_a_run_whose_tool_output_is_nested_too_deep(operator: User) -> None:
    world = World()
    run = world.create(script=[])
    state = drive_with(run, world, [READ, READ], Hostile(world, nested(3 * MAX_DEPTH)))
    assert state.outcome == "receipt_invalid"
    assert "cannot be stored" in state.stop_message and "nested more than" in state.stop_message
    (receipt,) = Receipt.objects.filter(run=run)
    assert not receipt.valid and receipt.body["summary"]["bytes"] > 0
    api_reads_back(run, operator)


def test_it_lists_a_workspace_file_whose_name_is_not_utf8(host_executor: SandboxExecutor, operator: User) -> None:
    """A cloned file name that is not UTF-8, hit by list_files alone, in a real workspace."""
    (host_executor.workspace.dir / os.fsdecode(b"orders/caf\xe9.txt")).write_bytes(b"data\n")
    host_executor.workspace.reread()
    contract = {
        **CONTRACT,
        "allowed_tools": ALL_TOOLS,
        "allowed_write_paths": list(WRITE_PATHS),
        "verification_targets": ["tests"],
    }
    run = do_create_run(check_new_run(contract, {"kind": "scripted", "script": []}), None, lambda run: host_executor.revision())
    environment = Environment(host_executor, host_executor)
    proposals = [call("list_files", path="orders"), call("read_file", path="orders/total.py")]
    state = drive_run(run, environment, DjangoApprovals(run), proposer=ScriptedProposer(proposals))
    assert state.outcome == "proposals_exhausted", (state.outcome, state.stop_message)
    listed = Receipt.objects.filter(run=run).order_by("event_seq").first()
    assert listed is not None
    assert listed.valid and "orders/caf\\xe9.txt" in listed.body["data"]["files"]
    api_reads_back(run, operator)


class DeepSnapshot(ScriptedProposer):
    """A model whose conversation, as stored, is nested past what any encoder takes:
    nothing escapes it, so every checkpoint of this run would fail."""

    asked = 0

    def propose(self, feedback: Feedback | None) -> object | None:
        DeepSnapshot.asked += 1
        return super().propose(feedback)

    def snapshot(self) -> dict[str, JSON]:
        return {"kind": "scripted", "messages": nested(5000)}


def test_it_stops_a_run_whose_checkpoint_cannot_be_stored_instead_of_driving_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    run = world.create(script=[READ, READ, READ])
    monkeypatch.setattr(runtime, "environment_for", lambda run, lease, faults=(): world.environment())
    monkeypatch.setattr(run_services, "build_proposer", lambda *args, **kwargs: DeepSnapshot([READ, READ, READ]))
    DeepSnapshot.asked = 0
    assert runtime.advance(str(run.pk)) == "unstorable"
    run.refresh_from_db()
    assert (run.status, run.outcome) == ("stopped", "unstorable")
    assert "nested more than" in run.stop_message
    assert Event.objects.filter(run=run, type="stopped").count() == 1
    # The sweep's next pass finds a stopped run: nothing more is asked of the model.
    asked = DeepSnapshot.asked
    assert runtime.advance(str(run.pk)) == "unstorable"
    assert DeepSnapshot.asked == asked <= 1


@pytest.mark.parametrize(
    ("script", "field"),
    [
        ('[{"tool": "read_file", "args": {"path": "src/caf\\udce9.py"}}]', "proposer.script[0].args.path"),
        ('[{"tool": "read_file", "args": {"path": "src/\\u0000.py"}}]', "proposer.script[0].args.path"),
        # Deeper than a stored value may be, not as deep as the API's body limit (100
        # levels, refused before the fields are read: test_api_request_limits).
        (json.dumps([{"tool": "read_file", "args": {"x": nested(80)}}]), "proposer.script[0].args.x"),
    ],
    ids=["surrogate", "nul", "deep"],
)
def test_it_refuses_an_unstorable_script_with_a_400_naming_the_field_and_creates_nothing(
    script: str, field: str, operator: User, reviewer: User
) -> None:
    # Written as text: the JSON escapes are what a client sends.
    body = '{"contract": ' + json.dumps(SMALL_CONTRACT) + ', "proposer": {"kind": "scripted", "script": ' + script + "}}"
    response = client_for(operator).post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    errors = response.json()
    assert any(name.startswith(field) for name in errors), errors
    assert Run.objects.count() == 0
    assert client_for(reviewer).get("/api/runs/").status_code == 200


# -- the property: hostile values anywhere a model or a tool puts them ------------

BAD_TEXT = st.sampled_from(["\udce9", "\x00", "\ud800", "caf\udce9", "a\x00b", "\udcff\udc80"])
TEXT = st.text(max_size=8) | BAD_TEXT | st.builds(lambda bad, n: "Z" * n + bad, BAD_TEXT, st.sampled_from([10_000, 3_000_000]))
LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8)
DEEP = st.builds(nested, st.sampled_from([MAX_DEPTH - 2, MAX_DEPTH + 1, 250, 1000, 5000]), VALUES)
HOSTILE_VALUES = VALUES | DEEP


@st.composite
def hostile_runs(draw: st.DrawFn) -> tuple[object, object]:
    """A proposal with a hostile value in one place, and tool output with another."""
    value = draw(HOSTILE_VALUES)
    key = draw(TEXT)
    where = draw(st.sampled_from(["proposal", "args", "path", "extra", "tool", "key"]))
    proposal = {
        "proposal": value,
        "args": {"tool": "read_file", "args": value},
        "path": {"tool": "read_file", "args": {"path": value}},
        "extra": {"tool": "read_file", "args": {"path": "src/calc.py", "extra": value}},
        "tool": {"tool": value, "args": {}},
        "key": {"tool": "read_file", "args": {"path": "src/calc.py", key: value}},
    }[where]
    return proposal, draw(HOSTILE_VALUES)


@pytest.mark.slow  # property-based: 40 runs through the real store and the API
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(hostile_runs())
def test_it_never_wedges_a_run_and_the_api_reads_back_every_value_stored(operator: User, example: tuple[object, object]) -> None:
    proposal, output = example
    world = World()
    run = world.create(script=[])
    state = drive_with(run, world, [proposal, READ, READ], Hostile(world, output))
    assert state.status == "stopped", state.status  # the script ran out, or the output stopped it; never left running
    assert state.outcome in ("proposals_exhausted", "receipt_invalid"), (state.outcome, state.stop_message)
    run.refresh_from_db()
    assert run.status == "stopped" and load_state(run).proposals == state.proposals
    api_reads_back(run, operator)


NAMES = st.binary(min_size=1, max_size=12).filter(lambda name: b"/" not in name and b"\x00" not in name and name not in (b".", b".."))


@pytest.mark.slow  # property-based: 20 runs over a real workspace
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(NAMES, min_size=1, max_size=4, unique=True))
def test_it_never_wedges_on_file_names_that_are_not_utf8_in_a_real_workspace(
    host_executor: SandboxExecutor, operator: User, names: list[bytes]
) -> None:
    folder = host_executor.workspace.dir / "orders" / f"n{time.monotonic_ns()}"
    folder.mkdir()
    for name in names:
        (folder / os.fsdecode(name)).write_bytes(name)
    host_executor.workspace.reread()
    contract = {**CONTRACT, "allowed_tools": ALL_TOOLS, "allowed_write_paths": list(WRITE_PATHS)}
    run = do_create_run(check_new_run(contract, {"kind": "scripted", "script": []}), None, lambda run: host_executor.revision())
    listing = f"orders/{folder.name}"
    proposals = [
        call("list_files", path=listing),
        call("search", pattern="a", path=listing),
        *(call("read_file", path=f"{listing}/{os.fsdecode(name)}") for name in names),
    ]
    state = drive_run(run, Environment(host_executor, host_executor), DjangoApprovals(run), proposer=ScriptedProposer(proposals))
    assert state.status == "stopped" and state.outcome == "proposals_exhausted", (state.outcome, state.stop_message)
    run.refresh_from_db()
    assert run.status == "stopped"
    api_reads_back(run, operator)
