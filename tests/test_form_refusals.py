"""Forms that refuse bad input name every problem in one answer: the New run form
(a branch without a repository, a malformed scripted proposal, an unknown tool) and
the policy editor (a malformed constraint beside other errors, a repeated check id)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def policy_form(**changes: Any) -> dict[str, Any]:
    """The row editor's post for the project's current policy, with ``changes``."""
    from approvals.policies import current_policy_row
    from approvals.policy_editor import initial_data

    main, rules, checks = initial_data(current_policy_row().document)
    data: dict[str, Any] = {key: "" if value is None else value for key, value in main.items()}
    for prefix, rows in (("rules", rules), ("checks", checks)):
        data.update({f"{prefix}-TOTAL_FORMS": len(rows), f"{prefix}-INITIAL_FORMS": 0, f"{prefix}-MIN_NUM_FORMS": 0})
        data[f"{prefix}-MAX_NUM_FORMS"] = 1000
        for index, row in enumerate(rows):
            data.update({f"{prefix}-{index}-{name}": value for name, value in row.items() if value is not False})
            if prefix == "rules":
                data[f"{prefix}-{index}-ORDER"] = index + 1
    data.update(changes)
    return data


@pytest.mark.django_db
def test_it_names_every_policy_problem_beside_a_malformed_constraint(admin_user: User) -> None:
    data = policy_form(approval_ttl_seconds=0, sandbox_memory="lots", **{"rules-0-when": "no equals sign", "rules-1-decision": "maybe"})
    data["checks-0-check_id"] = "Bad ID!"
    data.pop("allow_self_approval", None)
    response = signed_in(admin_user).post(reverse("admin:approvals_policyversion_add"), data)
    page = response.content.decode()
    assert response.status_code == 200 and 'id="policy-problems"' in page
    for said in (
        "Rule row 1, argument constraints: &#x27;no equals sign&#x27;: each line must look like arg=glob1,glob2",
        "Approval TTL (seconds): must be at least 1",
        "Sandbox memory: must be a number followed by k, m or g",
        "Rule row 2, decision:",
        "Check row 1, check id: must be 1 to 64 lowercase letters",
    ):
        assert said in page, said


@pytest.mark.django_db
def test_it_refuses_a_check_id_used_twice(admin_user: User) -> None:
    from approvals.models import PolicyVersion

    data = policy_form()
    before = PolicyVersion.objects.count()
    count = int(data["checks-TOTAL_FORMS"])
    assert count >= 1
    copied = {key.replace("checks-0-", f"checks-{count}-"): value for key, value in data.items() if key.startswith("checks-0-")}
    data.update(copied, **{"checks-TOTAL_FORMS": count + 1})
    response = signed_in(admin_user).post(reverse("admin:approvals_policyversion_add"), data)
    page = response.content.decode()
    assert response.status_code == 200 and 'id="policy-problems"' in page, page[-3000:]
    assert f"Check row {count + 1}, check id: &#x27;{data['checks-0-check_id']}&#x27; is already the id of check row 1" in page
    assert PolicyVersion.objects.count() == before


@pytest.mark.docker
def test_it_asks_the_sandbox_engine_for_the_policys_runtime() -> None:
    # The policy admits runc and runsc only; a runtime the engine has not registered
    # stands in for runsc on an engine without gVisor (this one has both).
    from django.contrib import admin as site

    from approvals.models import PolicyVersion
    from site_admin.policies import PolicyVersionAdmin

    policy_admin = site.site._registry[PolicyVersion]
    assert isinstance(policy_admin, PolicyVersionAdmin)
    (problem,) = policy_admin.engine_problems({"sandbox": {"runtime": "nosuchruntime"}})
    assert problem.field == "sandbox.runtime"
    assert problem.message.startswith("the Docker engine has no runtime 'nosuchruntime'")
    assert policy_admin.engine_problems({"sandbox": {"runtime": "runc"}}) == []


@pytest.mark.django_db
def test_it_refuses_a_script_naming_a_tool_that_does_not_exist(admin_user: User) -> None:
    script = [{"tool": "read_file", "args": {"path": "a"}}, {"tool": "teleport", "args": {}}]
    form = {
        "template": "demo",
        "contract": "",
        "repository_ref": "",
        "proposer_kind": "scripted",
        "proposer_options": json.dumps({"script": script}),
    }
    response = signed_in(admin_user).post(reverse("runs:new"), form)
    page = response.content.decode()
    assert response.status_code == 400 and "script[1].tool: unknown tool &#x27;teleport&#x27;: the tools are " in page
    assert "script[0]" not in page and not Run.objects.exists()
