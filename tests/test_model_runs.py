"""A run driven by a model (through the official OpenAI client, against a local
server speaking Chat Completions) in the real sandbox: the first message shows the
repository (its instructions, its files, the source the run may change) as
untrusted data, and the conversation survives the approval wait unchanged."""

from __future__ import annotations

import re

import docker
import pytest
from django.contrib.auth.models import User
from pytest_django import Settings

from approvals.models import ApprovalRequest
from runs.approval_flow.flow import grant
from runs.models import Run
from runs.runtime import advance, create_run, workspace_for
from tests.fake_providers import API_KEY, FakeOpenAI, openai_tools
from tests.runs_waiting import DEMO_CONTRACT, DEMO_SCRIPT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

# The model makes the demo's moves, one tool call per reply.
REPLIES = [openai_tools((f"call_{n}", step["tool"], step["args"])) for n, step in enumerate(DEMO_SCRIPT, start=1)]


def blocks(text: str) -> dict[str, str]:
    """source -> content of each untrusted block in ``text``."""
    found = re.findall(r'<untrusted-data id="([0-9a-f]{16})" source="([^"]*)">\n(.*?)\n</untrusted-data id="\1">', text, re.DOTALL)
    return {source: content for _, source, content in found}


def test_it_shows_the_model_the_repository_first_and_keeps_the_conversation_across_the_approval(
    docker_engine: docker.DockerClient, settings: Settings, operator: User, reviewer: User
) -> None:
    with FakeOpenAI(REPLIES) as fake:
        settings.OPENAI_API_KEY = API_KEY
        settings.OPENAI_ALLOWED_BASE_URLS = [fake.base_url]
        run = create_run(DEMO_CONTRACT, {"kind": "openai", "model": "gpt-4o-mini", "base_url": fake.base_url}, operator, enqueue=False)
        assert advance(str(run.pk)) == "waiting_approval"
        workspace = workspace_for(run)

        task = fake.bodies[0]["messages"][1]["content"]
        shown = blocks(task)
        agents = (workspace.pristine / "AGENTS.md").read_text()
        assert shown["repository instructions"].endswith(agents)
        files = shown["repository state"].splitlines()
        assert files[-5:] == ["AGENTS.md", "orders/__init__.py", "orders/total.py", "pytest.ini", "tests/test_total.py"]
        assert shown["file orders/total.py"].endswith((workspace.pristine / "orders" / "total.py").read_text())
        assert "file tests/test_total.py" not in shown  # the run may not write the tests
        order = [task.index(s) for s in ("# Task", "# Acceptance criteria", "# Repository", "# Relevant source", "# Tools")]
        assert order == sorted(order)

        # The resumed conversation replays the first message as it was sent.
        grant(ApprovalRequest.objects.get(run=run, status="pending"), reviewer)
        assert advance(str(run.pk)) == "complete"
        assert len(fake.bodies) == len(REPLIES)
        assert fake.bodies[-1]["messages"][1]["content"] == task
    run = Run.objects.get(pk=run.pk)
    assert run.status == "complete"
