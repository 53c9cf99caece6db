"""The rig for running the real agent CLIs (Claude Code, Codex, Gemini CLI) as a run's
agent (tests/test_agent_launch.py, tests/test_trial_agents.py): a scripted model server
on 127.0.0.1 (model_servers.py), a real Daphne whose model proxy forwards to it with the
server's keys, and a real Celery worker whose agents reach that Daphne; how each CLI
names Harness's tools and its own, and the helpers both files wait and look with.

It is a pytest plugin (tests/conftest.py names it) for its ``agent_rig`` fixture."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from pytest_django import Settings

from runs.models import Event, Run
from runs.persistence.artifacts import ArtifactStorage
from runs.runtime import create_run
from sandbox.public import containers_by_run, remove_containers, shared_client
from tests.agents_support.model_servers import ModelServer, Text, ToolCall, Turn, model_server, per_model_server
from tests.fixtures_services import Worker, purge_queue
from tests.fixtures_web import AsgiServer
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT
from trials import service
from trials.models import Trial

AGENT_MARKS = (pytest.mark.slow, pytest.mark.agent_cli, pytest.mark.docker, pytest.mark.celery)
SERVER_KEY = "sk-server-key-for-the-scripted-model"
RUN_SECONDS = 420  # a shared two-core machine: generous, never a speed assertion


@dataclass(frozen=True)
class Cli:
    preset: str
    model: str
    prefix: str  # how the CLI names a harness tool to its model: prefix + tool
    shell: ToolCall  # the CLI's own shell tool, as its model would call it
    edit: ToolCall  # the CLI's own file-writing tool
    refusal: str  # how the CLI tells its model a tool is not there, as the request's JSON text holds it

    def tool(self, name: str, args: dict[str, Any]) -> ToolCall:
        return ToolCall(self.prefix + name, args)

    def proposer(self) -> dict[str, Any]:
        return {"kind": "agent", "preset": self.preset, "model": self.model}


CLAUDE = Cli(
    "claude-code",
    "claude-sonnet-4-5",
    "mcp__harness__",
    ToolCall("Bash", {"command": "echo hacked >> orders/total.py", "description": "edit"}),
    ToolCall("Write", {"file_path": "/workspace/orders/total.py", "content": "hacked\n"}),
    "No such tool available: {tool}",
)
CODEX = Cli(
    "codex",
    "gpt-5.1-codex",
    "mcp__harness__",  # a namespace: the scripted server sends {"namespace": "mcp__harness", "name": tool}
    ToolCall("shell", {"command": ["sh", "-c", "echo hacked >> orders/total.py"]}),
    ToolCall("apply_patch", {"input": "*** Begin Patch\n*** Add File: orders/probe.py\n+x\n*** End Patch\n"}),
    "unsupported call: {tool}",
)
GEMINI = Cli(
    "gemini-cli",
    "gemini-2.5-pro",
    "mcp_harness_",
    ToolCall("run_shell_command", {"command": "echo hacked >> orders/total.py"}),
    ToolCall("write_file", {"file_path": "orders/total.py", "content": "hacked\n"}),
    'Tool \\"{tool}\\" not found',
)
CLIS = [CLAUDE, CODEX, GEMINI]


def demo_script(cli: Cli) -> list[Turn]:
    """The demo task as a model would do it through the CLI: read, patch, run the
    tests check, publish (a reviewer grants), finish."""
    return [cli.tool(step["tool"], step["args"]) for step in DEMO_SCRIPT] + [Text("FINAL: done")]


def events(run: Run, kind: str) -> list[dict[str, Any]]:
    return [dict(e.payload) for e in Event.objects.filter(run=run, type=kind).order_by("seq")]


def agent_containers(run: Run) -> list[str]:
    found = containers_by_run(scope=django_settings.SANDBOX_SCOPE, run_id=str(run.pk), client=shared_client())
    return [i for ids in found.values() for i in ids]


@dataclass
class Rig:
    """What one ``agent_rig(...)`` started, and the runs and trials the test made on it
    (their containers are removed when the test ends; ``log`` tells what they said)."""

    model: ModelServer
    web: AsgiServer
    worker: Worker
    runs: list[Run] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)

    def start(self, cli: Cli, operator: User, contract: dict[str, Any] | None = None) -> Run:
        run = create_run(contract or DEMO_CONTRACT, cli.proposer(), operator)
        self.runs.append(run)
        return run

    def all_runs(self) -> list[Run]:
        return self.runs + [run for trial in self.trials for run in service.runs_of(trial)]

    def log(self) -> str:
        requests = [(r.method, r.path, r.turn) for r in self.model.requests]
        agents = []
        for run in self.all_runs():
            for end in events(run, "agent_ended"):
                said = [ArtifactStorage().get(ref).decode(errors="replace")[-3000:] for ref in end["artifacts"]]
                agents.append(f"{run.pk} {end}\n" + "\n--\n".join(said))
        progress = f"trials: {[service.progress(t) for t in self.trials]}\n" if self.trials else ""
        return (
            f"model requests: {requests}\n{progress}--- agents ---\n{chr(10).join(agents)}\n"
            f"--- worker ---\n{self.worker.log()[-6000:]}\n--- web ---\n{self.web.log()[-3000:]}"
        )

    def until(self, predicate: Callable[[], object], timeout: float = RUN_SECONDS) -> None:
        """Wait for ``predicate``; an assertion it raises, or the time running out, fails
        the test with the rig's log."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if predicate():
                    return
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{self.log()}") from None
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.2)

    def sweep(self) -> None:
        for run in self.all_runs():
            remove_containers(agent_containers(run))


MakeRig = Callable[..., Rig]


@pytest.fixture
def agent_rig(transactional_db: None, agent_image: str, tmp_path_factory: pytest.TempPathFactory, settings: Settings) -> Iterator[MakeRig]:
    """``agent_rig(script, concurrency=2, gateway="web", prices=None)``: the scripted
    model server (or, given a mapping of model to script, one where each model's
    conversations take their own turns), Daphne with the model proxy pointed at it (the
    server's keys), and a Celery worker of ``concurrency`` processes whose agents reach
    that Daphne (or, ``gateway="model"``, the model server itself: a gateway that is no
    Harness). With ``prices`` (USD per million tokens, by model) the proxy prices what it
    forwards and Harness's own loop may ask the server too: the worker and this process
    get the server's key, its base URL and the prices. All stopped, and every container
    of the test's runs and trials removed, when the test ends."""
    with contextlib.ExitStack() as stack:
        made: list[Rig] = []

        def make(
            script: Sequence[Turn] | Mapping[str, Sequence[Turn]],
            concurrency: int = 2,
            gateway: Literal["web", "model"] = "web",
            prices: Mapping[str, Mapping[str, float]] | None = None,
        ) -> Rig:
            model = stack.enter_context(per_model_server(script) if isinstance(script, Mapping) else model_server(script))
            env = {
                "ANTHROPIC_BASE_URL": model.base_url,
                "ANTHROPIC_API_KEY": SERVER_KEY,
                "OPENAI_BASE_URL": f"{model.base_url}/v1",
                "OPENAI_API_KEY": SERVER_KEY,
                "GEMINI_BASE_URL": model.base_url,
                "GEMINI_API_KEY": SERVER_KEY,
                "HARNESS_ANTHROPIC_ALLOWED_BASE_URLS": model.base_url,
                "HARNESS_OPENAI_ALLOWED_BASE_URLS": f"{model.base_url}/v1",
            }
            loop_env: dict[str, str] = {}
            if prices is not None:
                env["HARNESS_MODEL_PRICES"] = json.dumps(prices)
                loop_env = env
                settings.OPENAI_API_KEY = SERVER_KEY
                settings.OPENAI_ALLOWED_BASE_URLS = [f"{model.base_url}/v1"]
                settings.HARNESS_MODEL_PRICES = prices
            web = AsgiServer(tmp_path_factory.mktemp("daphne"), **env)
            web.start()
            stack.callback(web.stop)
            purge_queue()
            worker = Worker(
                tmp_path_factory.mktemp("worker"),
                concurrency=concurrency,
                env={
                    **loop_env,
                    "HARNESS_AGENT_GATEWAY_URL": web.url if gateway == "web" else model.base_url,
                    "HARNESS_AGENT_IMAGE": agent_image,
                },
            )
            worker.start()
            stack.callback(purge_queue)
            stack.callback(worker.stop)
            rig = Rig(model, web, worker)
            made.append(rig)
            return rig

        def sweep() -> None:
            for rig in made:
                rig.sweep()

        stack.callback(sweep)
        yield make
