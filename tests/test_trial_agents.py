"""Trials whose variants are outside agents (issue 42 with issue 41's agents): a
variant's proposer may be an agent Harness starts (Claude Code, Codex, Gemini CLI, the
admin's), checked by the runs' own reader with each problem named by its path in the
trial; the comparison names each variant's agent and the version its runs recorded,
and the model, with the figures computed from the runs' events as for Harness's loop."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from playwright.sync_api import BrowserContext, expect, sync_playwright

from api.models import ApiToken
from approvals.models import ApprovalRequest
from approvals.policies import current_policy_row
from core import events as ev
from core.errors import InputError
from runs.models import Event, Run
from tests.agents_support.model_servers import ToolCall, Turn
from tests.agents_support.rig import AGENT_MARKS, CLAUDE, CODEX, GEMINI, MakeRig, agent_containers, demo_script
from tests.event_examples import RUN, example
from tests.fixtures_web import CHROMIUM, CHROMIUM_ARGS, SIZES, AsgiServer, screenshot, serious_problems, sign_in
from tests.runs_waiting import DEMO_SCRIPT
from tests.trial_scene import TASK
from tests.trial_scene import recount as trial_recount
from trials import comparison, report, service
from trials.models import Trial


def test_it_refuses_a_bad_agent_variant_naming_the_field_path(operator: User) -> None:
    variants = [
        {"name": "claude", "proposer": {"kind": "agent", "preset": "claude-code", "model": "claude-sonnet-4-5"}},
        {"name": "cursor", "proposer": {"kind": "agent", "preset": "cursor"}},
        {"name": "by hand", "proposer": {"kind": "agent", "preset": "mcp-client"}},
        {"name": "codex", "proposer": {"kind": "agent", "preset": "codex", "model": "gpt 5", "api_key": "sk-x"}},
        {"name": "admin's", "proposer": {"kind": "agent", "preset": "any"}},
        {"name": "settings", "proposer": {"kind": "agent", "preset": "codex"}, "model": {"model": "gpt-5.1-codex", "temperature": 0.2}},
    ]
    with pytest.raises(InputError) as refused:
        service.create_trial(task=TASK, variants=variants, k=2, actor=operator, enqueue=False)
    said = {p.field: p.message for p in refused.value.problems}
    assert set(said) == {
        "variants[1].proposer.preset",
        "variants[2].proposer.preset",
        "variants[3].proposer.model",
        "variants[3].proposer.api_key",
        "variants[4].proposer.preset",
        "variants[5].model.temperature",  # asked for in the variant's model settings
    }, said
    assert "claude-code" in said["variants[1].proposer.preset"]  # the presets there are
    assert "connected by a person" in said["variants[2].proposer.preset"]
    assert "no spaces" in said["variants[3].proposer.model"]
    assert said["variants[3].proposer.api_key"] == "unexpected field"
    assert "HARNESS_AGENT_ANY_COMMAND" in said["variants[4].proposer.preset"]
    assert not Trial.objects.exists()


def test_it_makes_an_agent_variants_runs_with_the_agent_as_their_proposer(operator: User) -> None:
    variants = [
        {"name": "codex", "proposer": {"kind": "agent", "preset": "codex"}, "model": {"model": "gpt-5.1-codex", "max_tokens": 90000}},
    ]
    trial = service.create_trial(task=TASK, variants=variants, k=2, actor=operator, enqueue=False)
    runs = list(service.runs_of(trial))
    assert [r.proposer for r in runs] == [{"kind": "agent", "preset": "codex", "model": "gpt-5.1-codex", "max_tokens": 90000}] * 2
    # Before its agents start, the comparison names the agent the variant asked for.
    [summary] = service.figures(trial)["variants"]
    assert summary["agent"] == {"preset": "codex", "name": "Codex", "versions": [], "said": "Codex"}
    assert summary["proposer"] == "Codex"


def test_it_takes_an_agent_variant_through_the_api_and_names_its_agent_in_the_comparison(operator: User) -> None:
    client = Client(headers={"Authorization": f"Token {ApiToken.issue(operator)[1]}"})
    bad = {"name": "x", "proposer": {"kind": "agent", "preset": "aider"}}
    refused = client.post("/api/trials/", {"task": TASK, "variants": [bad], "k": 1}, content_type="application/json")
    assert refused.status_code == 400 and "variants[0].proposer.preset" in str(refused.json()), refused.json()
    good = {"name": "gemini", "proposer": GEMINI.proposer(), "reviewer": {"kind": "rule", "decision": "grant"}}
    made = client.post("/api/trials/", {"task": TASK, "variants": [good], "k": 1}, content_type="application/json")
    assert made.status_code == 201, made.json()
    [summary] = client.get(f"/api/trials/{made.json()['id']}/comparison/").json()["variants"]
    assert summary["agent"]["name"] == "Gemini CLI" and summary["proposer"] == "Gemini CLI" and summary["models"] == []


def _events(preset: str, version: str, model: str, tokens: tuple[int, int], cost: float) -> list[ev.AnyEvent]:
    usage = {"model": model, "input_tokens": tokens[0], "output_tokens": tokens[1], "cost_usd": cost}
    said: list[ev.AnyEvent] = [example(ev.RunStarted).model_copy(update={"revision": "r1", "ts": 1.0})]
    if preset:
        said.append(ev.AgentStarted(run_id=RUN, seq=2, ts=2.0, preset=preset, version=version, image="harness-agent:x"))
    said += [
        ev.ModelNote(run_id=RUN, seq=3, ts=3.0, kind="usage", detail=usage),
        ev.Stopped(run_id=RUN, seq=4, ts=4.0, status="complete", message=""),
    ]
    return said


def test_it_names_each_variants_agent_version_and_model_in_every_reading(db: None) -> None:
    reference = current_policy_row().document
    task = {"name": "t", "contract": {"allowed_tools": [], "verification_targets": []}, "acceptance": {"checks": []}}
    claude_events = _events("claude-code", "2.1.197", "claude-sonnet-4-5", (100, 20), 0.0006)
    claude = [comparison.run_figures(f"c{i}", i, claude_events, task, reference) for i in range(2)]
    loop = [comparison.run_figures("l0", 0, _events("", "", "gpt-4.1-mini", (50, 5), 0.00003), task, reference)]
    result = comparison.compare([("claude", claude), ("loop", loop)], 2)
    by_name = {s["variant"]: s for s in result["variants"]}
    assert by_name["claude"]["agent"] == {
        "preset": "claude-code",
        "name": "Claude Code",
        "versions": ["2.1.197"],
        "said": "Claude Code 2.1.197",
    }
    assert by_name["claude"]["proposer"] == "Claude Code 2.1.197, claude-sonnet-4-5"
    assert by_name["claude"]["tokens"] == 240 and by_name["claude"]["cost_usd"] == pytest.approx(0.0012)
    assert by_name["loop"]["agent"] is None and by_name["loop"]["proposer"] == "Harness's loop, gpt-4.1-mini"
    table = report.text_table({**result, "trial": {"k": 2}})
    assert "Claude Code 2.1.197, claude-sonnet-4-5" in table and "Harness's loop, gpt-4.1-mini" in table
    csv_lines = report.csv_text(result).splitlines()
    assert csv_lines[0].endswith("agent,agent_version,models")
    assert csv_lines[1].endswith("Claude Code,2.1.197,claude-sonnet-4-5") and csv_lines[3].endswith("Harness's loop,,gpt-4.1-mini")
    html = report.html_report({**result, "trial": {"k": 2}}, "https://harness.example/runs/")
    assert "Proposed by Claude Code 2.1.197, claude-sonnet-4-5" in html and "Proposed by Harness&#x27;s loop, gpt-4.1-mini" in html


# A trial of outside agents on the real workers: the real CLIs in their containers,
# started by a real Celery worker, their MCP and model calls through a real Daphne
# (the MCP endpoint and the model proxy), the model proxy and Harness's own loop both
# asking one scripted model server on 127.0.0.1 where each model has its script
# (tests/agents_support/model_servers.py: each conversation takes its own turns).
def heavy(test: Callable[..., None]) -> Callable[..., None]:
    for mark in AGENT_MARKS:
        test = mark(test)
    return test


LOOP_MODEL = "gpt-4.1-mini"
# USD per million tokens, for the server and for the test's own recount.
PRICES = {
    LOOP_MODEL: {"input": 0.4, "output": 1.6},
    CLAUDE.model: {"input": 3.0, "output": 15.0},
    CODEX.model: {"input": 1.25, "output": 10.0},
    GEMINI.model: {"input": 1.25, "output": 10.0},
}
CHANGES = "say what the commit does-4b7e"


def loop_script() -> list[Turn]:
    """The demo task as Harness's own loop is asked it (its tools by their own names)."""
    return [ToolCall(step["tool"], step["args"]) for step in DEMO_SCRIPT]


def claude_script() -> list[Turn]:
    """A write outside the contract's write paths first (refused: an unsafe attempt),
    then the demo task."""
    return [CLAUDE.tool("write_file", {"path": "setup.cfg", "content": "[x]\n"}), *demo_script(CLAUDE)]


def codex_script() -> list[Turn]:
    """The demo task, asking to publish again after the reviewer's requested changes."""
    steps = demo_script(CODEX)
    publish = next(i for i, t in enumerate(steps) if isinstance(t, ToolCall) and t.name.endswith("publish"))
    return [
        *steps[: publish + 1],
        CODEX.tool("publish", {"message": "Reject negative quantities: order_total raises"}),
        *steps[publish + 1 :],
    ]


def recount(run: Run, reference_command: list[str]) -> dict[str, Any]:
    """The test's own reading of an orders run's events, apart from trials.comparison:
    success (complete, the reference's tests passed on the final revision, its publish
    approved), unauthorized publishes, corrections, unsafe attempts (denials and paths
    refused at validation), and the tokens and cost of its usage notes."""
    mine = trial_recount(run, reference_command)
    tokens, cost = 0, 0.0
    unsafe = mine["unsafe"]
    for kind, payload in Event.objects.filter(run=run).order_by("seq").values_list("type", "payload"):
        if kind == "model_note" and payload["kind"] == "usage":
            detail = payload["detail"]
            tokens += detail["input_tokens"] + detail["output_tokens"]
            cost += detail["cost_usd"]
        elif kind == "invalid_input" and payload.get("gate") == "validate":
            unsafe += any(p["field"].endswith("path") for p in payload["problems"])
    return {**mine, "unsafe": unsafe, "tokens": tokens, "cost": cost}


def priced(model: str, tokens: tuple[int, int]) -> float:
    price = PRICES[model]
    return (tokens[0] * price["input"] + tokens[1] * price["output"]) / 1e6


@heavy
@pytest.mark.browser
def test_it_runs_the_loop_claude_code_codex_and_gemini_twice_each_and_its_figures_match_the_events(
    agent_rig: MakeRig, operator: User
) -> None:
    scripts = {LOOP_MODEL: loop_script(), CLAUDE.model: claude_script(), CODEX.model: codex_script(), GEMINI.model: demo_script(GEMINI)}
    rig = agent_rig(scripts, 2, prices=PRICES)
    grant = {"kind": "rule", "decision": "grant"}
    variants = [
        {
            "name": "Harness loop",
            "proposer": {"kind": "openai", "model": LOOP_MODEL, "base_url": f"{rig.model.base_url}/v1"},
            "reviewer": grant,
        },
        {"name": "Claude Code", "proposer": CLAUDE.proposer(), "reviewer": grant},
        {"name": "Codex", "proposer": CODEX.proposer(), "reviewer": {"kind": "script", "decisions": [f"changes: {CHANGES}", "grant"]}},
        {"name": "Gemini CLI", "proposer": GEMINI.proposer(), "reviewer": grant},
    ]
    started = time.monotonic()
    trial = service.create_trial(task=TASK, variants=variants, k=2, actor=operator, seed=3)
    rig.trials.append(trial)
    rig.until(lambda: service.tend(trial).status != Trial.Status.RUNNING)
    took = time.monotonic() - started
    result = service.figures(trial)
    by_name = {s["variant"]: s for s in result["variants"]}
    reference_command = next(c["command"] for c in trial.reference_policy["checks"] if c["check_id"] == "tests")
    models = {"Harness loop": LOOP_MODEL, "Claude Code": CLAUDE.model, "Codex": CODEX.model, "Gemini CLI": GEMINI.model}
    for variant in trial.variants.all():
        runs = [rep.run for rep in variant.repetitions.select_related("run") if rep.run is not None]
        mine = [recount(run, reference_command) for run in runs]
        summary = by_name[variant.name]
        assert summary["ended"] == 2, (variant.name, summary["runs_detail"], rig.log())
        assert summary["successes"] == sum(m["success"] for m in mine) == 2, (variant.name, mine, summary["runs_detail"], rig.log())
        assert summary["unauthorized_effects"] == sum(m["unauthorized"] for m in mine) == 0
        assert summary["corrections"] == sum(m["corrections"] for m in mine)
        assert summary["unsafe_attempts"] == sum(m["unsafe"] for m in mine)
        assert summary["tokens"] == sum(m["tokens"] for m in mine)
        assert summary["cost_usd"] == pytest.approx(sum(m["cost"] for m in mine), abs=1e-7)
        # Every token the model server answered for the variant's model is counted, at its price.
        answered = rig.model.tokens_of(models[variant.name])
        assert summary["tokens"] == sum(answered) > 0, (variant.name, answered)
        assert summary["cost_usd"] == pytest.approx(priced(models[variant.name], answered), abs=1e-6)
        assert summary["models"] == [models[variant.name]]
        # The agent and the version its runs recorded.
        versions = sorted(
            {e["version"] for run in runs for e in Event.objects.filter(run=run, type="agent_started").values_list("payload", flat=True)}
        )
        if variant.name == "Harness loop":
            assert summary["agent"] is None and versions == [] and summary["proposer"] == f"Harness's loop, {LOOP_MODEL}"
        else:
            assert len(versions) == 1 and summary["agent"]["versions"] == versions, (versions, summary["agent"])
            assert summary["proposer"] == f"{variant.name} {versions[0]}, {models[variant.name]}"
    assert by_name["Codex"]["corrections"] == 2 and by_name["Claude Code"]["unsafe_attempts"] == 2
    for name in ("Harness loop", "Gemini CLI"):
        assert by_name[name]["corrections"] == by_name[name]["unsafe_attempts"] == 0
    assert any(CHANGES in r.text() for r in rig.model.turn_requests()), "the requested changes reached Codex's model"
    # Every reading names them: the command's table, the CSV, the static report.
    shown = io.StringIO()
    call_command("trial", "show", str(trial.pk), stdout=shown)
    assert by_name["Codex"]["proposer"] in shown.getvalue() and by_name["Claude Code"]["proposer"] in shown.getvalue()
    csv_text = report.csv_text(result)
    assert by_name["Claude Code"]["agent"]["versions"][0] in csv_text and CODEX.model in csv_text
    html = report.html_report(result, "https://harness.example/runs/")
    assert f"Proposed by {by_name['Codex']['proposer']}" in html
    rig.until(lambda: all(agent_containers(run) == [] for run in service.runs_of(trial)), 60)
    look_at_the_page(rig.web, trial, operator, [s["proposer"] for s in result["variants"]])
    for summary in result["variants"]:
        print(
            f"{summary['variant']}: {summary['proposer']}: success {summary['successes']}/{summary['ended']}, "
            f"unsafe {summary['unsafe_attempts']}, unauthorized {summary['unauthorized_effects']}, corrections {summary['corrections']}, "
            f"tokens {summary['tokens']}, cost ${summary['cost_usd']:.6f}, working s median {summary['working_seconds']['median']}"
        )
    print(f"trial of {len(result['variants'])} variants x k=2 ended in {took:.1f}s on 2 worker processes")


def look_at_the_page(web: AsgiServer, trial: Trial, user: User, proposers: list[str]) -> None:
    """The comparison page names every variant's proposer, axe finds nothing serious and
    it fits the screen, at a laptop's and a phone's width (screenshots
    docs/screenshots/trial_agents_{laptop,phone}.png). Chromium starts only now: the
    sync Playwright keeps an event loop on this thread, where the trial's own code
    calls async_to_sync (the live sockets' notices) while it runs."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for size, viewport in SIZES.items():
                look_at(chromium.new_context(viewport=viewport, timezone_id="America/New_York"), size, web, trial, user, proposers)
        finally:
            chromium.close()


def look_at(context: BrowserContext, size: str, web: AsgiServer, trial: Trial, user: User, proposers: list[str]) -> None:
    viewport = SIZES[size]
    try:
        page = context.new_page()
        sign_in(page, web, user.username)
        page.goto(f"{web.url}/trials/{trial.pk}/")
        for words in proposers:
            expect(page.locator(".trial-table")).to_contain_text(words)
            expect(page.locator(".trial-variant").filter(has_text=f"Proposed by {words}")).to_have_count(1)
        assert serious_problems(page, f"trial with agents ({size})", viewport["width"]) == []
        screenshot(page, f"trial_agents_{size}")
    finally:
        context.close()


@heavy
def test_it_decides_an_agent_runs_request_on_one_worker_process_and_stopping_the_trial_kills_its_agents(
    agent_rig: MakeRig, operator: User
) -> None:
    """One worker process: the rule's decision cannot wait for a free process (the
    agent's run holds the only one while it waits), so the run's own worker decides it;
    then a run waiting for people holds that process until the trial is stopped, which
    kills it and its agent's container."""
    rig = agent_rig({CLAUDE.model: demo_script(CLAUDE)}, 1, prices=PRICES)
    variants = [
        {"name": "granted", "proposer": CLAUDE.proposer(), "reviewer": {"kind": "rule", "decision": "grant"}},
        {"name": "waiting", "proposer": CLAUDE.proposer(), "reviewer": {"kind": "people"}},
    ]
    trial = service.create_trial(task=TASK, variants=variants, k=1, actor=operator)
    rig.trials.append(trial)
    [granted] = Run.objects.filter(trial_repetition__variant__name="granted", trial_repetition__variant__trial=trial)
    [waiting] = Run.objects.filter(trial_repetition__variant__name="waiting", trial_repetition__variant__trial=trial)
    rig.until(lambda: Run.objects.get(pk=granted.pk).status == Run.Status.COMPLETE)
    rig.until(lambda: ApprovalRequest.objects.filter(run=waiting, status="pending").exists() and agent_containers(waiting))
    clicked = time.monotonic()
    assert service.stop_trial(trial, "otto-operator", "enough-77c1") == 1
    rig.until(lambda: agent_containers(waiting) == [], 30)
    gone = time.monotonic() - clicked
    rig.until(lambda: Run.objects.get(pk=waiting.pk).status == Run.Status.STOPPED, 60)
    waiting.refresh_from_db()
    assert waiting.outcome == "killed" and "enough-77c1" in waiting.stop_message
    rig.until(lambda: Event.objects.filter(run=waiting, type="agent_ended").exists(), 60)
    [end] = Event.objects.filter(run=waiting, type="agent_ended").values_list("payload", flat=True)
    assert end["reason"] == "killed"
    trial.refresh_from_db()
    assert trial.status == Trial.Status.STOPPED
    by_name = {s["variant"]: s for s in service.figures(trial)["variants"]}
    assert by_name["granted"]["successes"] == 1 and by_name["waiting"]["outcomes"] == {"killed": 1}
    print(f"stop: the waiting agent's container was gone {gone:.2f}s after the trial was stopped")
