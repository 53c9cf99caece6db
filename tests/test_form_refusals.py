"""Forms that refuse bad input name every problem in one answer: the New run form
(a branch without a repository, a malformed scripted proposal, an unknown tool) and
the policy editor (a malformed constraint beside other errors, a repeated check id)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from runs.models import Run


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_it_refuses_a_lone_branch_a_malformed_script_and_an_unknown_tool_at_once(admin_user: User) -> None:
    contract = json.loads((Path(settings.BASE_DIR) / "examples/demo/contract.json").read_text())
    contract["allowed_tools"] = [*contract["allowed_tools"], "teleport"]
    form = {
        "template": "",
        "contract": json.dumps(contract),
        "repository_ref": "feature/x",
        "proposer_kind": "scripted",
        "proposer_options": json.dumps({"script": [{"tool": "read_file", "args": {"path": "a"}}, {"tool": 5}]}),
    }
    response = signed_in(admin_user).post(reverse("runs:new"), form)
    page = response.content.decode()
    assert response.status_code == 400
    for said in (
        "a branch, tag or commit needs a repository URL",
        "allowed_tools[9]: unknown tool &#x27;teleport&#x27;",
        "script[1].tool: required, must be a string",
        "script[1].args: required, must be an object",
    ):
        assert said in page, said
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_it_names_a_lone_branch_even_when_the_rest_is_fine(admin_user: User) -> None:
    form = {"template": "demo", "contract": "", "repository_ref": "main", "proposer_kind": "scripted", "proposer_options": ""}
    response = signed_in(admin_user).post(reverse("runs:new"), form)
    assert response.status_code == 400 and "needs a repository URL" in response.content.decode()
    assert not Run.objects.exists()
    # The same form without the branch starts the run.
    response = signed_in(admin_user).post(reverse("runs:new"), {**form, "repository_ref": ""})
    assert response.status_code == 302 and Run.objects.count() == 1
