"""Starting a run from the browser: a contract from a template in ``examples/`` or
pasted, and who proposes its calls: Harness's own loop (a script or a model) or an
outside agent (its preset and model; issue 41). Refused input comes back with every
offending field named. An ``mcp-client`` run's creator is shown its MCP URL and
token once, on the page the form's POST answers (runs.agent_runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from common.permissions import ADD_RUNS
from core.errors import FieldProblem, InputError, json_message
from pages.access import require
from projects.access import default_start_slug, projects_with
from runs.agent_runs import start_run
from runs.agents.names import CHOICES
from runs.agents.proposer import PRESETS, startable
from runs.proposers import PROPOSER_KINDS
from runs.runtime import check_run

# Which form field shows the problems of each kind of refused input.
FIELD_FOR = {
    "project": "project",
    "proposer.kind": "proposer_kind",
    "proposer.preset": "agent_preset",
    "template": "template",
    "contract": "contract",
    "workspace": "contract",
    "proposer": "proposer_options",
    "script": "proposer_options",
}
# A repository named in the form replaces the contract's workspace.
REPOSITORY_FIELDS = {"workspace.url": "repository_url", "workspace.ref": "repository_ref"}
# Who proposes, as the form offers it: Harness's own loop, or an outside agent.
KIND_LABELS = {
    "scripted": "Harness's own loop: a fixed script (scripted)",
    "openai": "Harness's own loop: an OpenAI model (openai)",
    "anthropic": "Harness's own loop: an Anthropic model (anthropic)",
    "agent": "An outside agent, chosen below (agent)",
}


def preset_choices() -> list[tuple[str, str]]:
    """Every preset a run may name, each saying whether this server can start it yet."""
    return [("", "(choose the outside agent)")] + [
        (preset, CHOICES.get(preset, preset) + ("" if startable(preset) else ": not available on this server")) for preset in PRESETS
    ]


def contract_templates() -> dict[str, Path]:
    """Template name -> its directory, for every ``examples/<name>/contract.json``."""
    root = Path(settings.BASE_DIR) / "examples"
    return {path.parent.name: path.parent for path in sorted(root.glob("*/contract.json"))}


def template_documents() -> dict[str, dict[str, Any]]:
    """Each template's contract and scripted proposals, for the form's script to fill in."""
    documents = {}
    for name, folder in contract_templates().items():
        script = folder / "proposals.json"
        documents[name] = {
            "contract": (folder / "contract.json").read_text(),
            "script": script.read_text() if script.exists() else "",
        }
    return documents


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(what, [FieldProblem("(root)", json_message(exc))]) from None


def run_inputs(
    template: str,
    contract_text: str,
    kind: str,
    options_text: str,
    repository_url: str = "",
    repository_ref: str = "",
    preset: str = "",
    model: str = "",
) -> tuple[Any, dict[str, Any]]:
    """The contract and proposer configuration the form describes. The contract box
    wins over the template; a scripted proposer without options uses the
    template's proposals.json; a repository URL (and ref) makes the workspace a
    clone of that remote; an outside agent's preset and a model named in their
    fields win over the options'."""
    templates = contract_templates()
    if template and template not in templates:
        raise InputError("template", [FieldProblem("template", f"no template named {template!r}")])
    if contract_text.strip():
        contract = _parse_json(contract_text, "contract")
    elif template:
        contract = _parse_json((templates[template] / "contract.json").read_text(), "contract")
    else:
        raise InputError("contract", [FieldProblem("(root)", "pick a template or paste a contract")])
    if repository_url.strip() and isinstance(contract, dict):
        contract = {**contract, "workspace": {"kind": "git", "url": repository_url.strip(), "ref": repository_ref.strip() or None}}
    options: Any = {}
    if options_text.strip():
        options = _parse_json(options_text, "proposer")
    elif kind == "scripted" and template and (templates[template] / "proposals.json").exists():
        options = {"script": _parse_json((templates[template] / "proposals.json").read_text(), "script")}
    if not isinstance(options, dict):
        raise InputError("proposer", [FieldProblem("proposer", "options must be a JSON object")])
    if preset and kind != "agent":
        # Never dropped silently: the run would not be proposed by the agent chosen.
        raise InputError("proposer", [FieldProblem("proposer.preset", "an outside agent is chosen with the proposer 'agent'")])
    if preset:
        options = {**options, "preset": preset}
    if model.strip():
        options = {**options, "model": model.strip()}
    return contract, {**options, "kind": kind}


class NewRunForm(forms.Form):
    # Not required: a form without it (a script's post) starts where the API would.
    project = forms.ChoiceField(
        required=False, label="Project", help_text="The project the run belongs to: its members see, review and operate it."
    )
    template = forms.ChoiceField(required=False, label="Contract template")
    contract = forms.CharField(
        required=False,
        label="Contract (JSON)",
        widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false", "class": "code"}),
        help_text="Paste a contract, or leave empty to use the template as it is.",
    )
    repository_url = forms.CharField(
        required=False,
        max_length=2000,
        label="Repository URL",
        help_text="Optional: clone the workspace from this git remote (one the server allows) instead of the contract's workspace.",
    )
    repository_ref = forms.CharField(
        required=False, max_length=255, label="Branch, tag or commit", help_text="Empty: the repository's default branch."
    )
    proposer_kind = forms.ChoiceField(label="Proposer")
    agent_preset = forms.ChoiceField(
        required=False,
        label="Outside agent",
        help_text="The agent whose tool calls are the run's proposals, each through the same gates, approvals and sandbox.",
    )
    model = forms.CharField(
        required=False,
        max_length=200,
        label="Model",
        help_text="The model it calls (an agent's go through Harness's model proxy, with the server's key). "
        "Empty: the options' model, or for an agent any model the server prices.",
    )
    proposer_options = forms.CharField(
        required=False,
        label="Proposer options (JSON object)",
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "code"}),
        help_text='For example {"script": [...]} for the scripted proposer; {"max_tokens": 200000, "max_cost_usd": 5} for the '
        "run's own model budget, a model's or an outside agent's. Empty: the template's proposals.json (scripted).",
    )

    def __init__(self, *args: Any, user: User | AnonymousUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only the projects where the user may start runs: any other is not a choice,
        # whether it exists or not.
        project = cast(forms.ChoiceField, self.fields["project"])
        project.choices = [(slug, name) for slug, name in projects_with(user, ADD_RUNS).values_list("slug", "name")]
        project.initial = default_start_slug(user)
        # ``fields`` is typed as plain Fields; these two are declared as ChoiceFields above.
        cast(forms.ChoiceField, self.fields["template"]).choices = [("", "(none: paste below)")] + [
            (name, name) for name in contract_templates()
        ]
        cast(forms.ChoiceField, self.fields["proposer_kind"]).choices = [(kind, KIND_LABELS.get(kind, kind)) for kind in PROPOSER_KINDS]
        cast(forms.ChoiceField, self.fields["agent_preset"]).choices = preset_choices()

    def add_problems(self, exc: InputError) -> None:
        for problem in exc.problems:
            # A new run's problems are named "contract.…" or "proposer.…"; the box's
            # label says which, so the message names the field inside its JSON.
            head, _, inner = problem.field.partition(".")
            head = head.split("[", 1)[0]
            field = FIELD_FOR.get(problem.field) or FIELD_FOR.get(exc.what) or FIELD_FOR.get(head)
            if problem.field == "proposer.model" and (self["model"].value() or self["proposer_kind"].value() == "agent"):
                field = "model"  # the model came from its own field (or, for an agent, belongs there)
            if self["repository_url"].value():
                # The workspace came from the repository fields: its problems belong there.
                field = REPOSITORY_FIELDS.get(problem.field.removeprefix("contract."), field)
            if problem.field.startswith("(") or problem.field == head or field in ("proposer_kind", "agent_preset", "model"):
                self.add_error(field, problem.message)
            else:
                # A workspace problem is named from the contract's top ("workspace.url").
                shown = problem.field if exc.what == "workspace" else inner or problem.field
                self.add_error(field, f"{shown}: {problem.message}")


@never_cache
@require_http_methods(["GET", "POST"])
@require(ADD_RUNS)
def new_run(request: HttpRequest) -> HttpResponse:
    form = NewRunForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)  # add_error below drops the field from cleaned_data
        # A branch alone would be dropped silently (only a repository URL replaces the
        # workspace): refused, alongside whatever else is wrong with the run.
        lone_ref = bool(data["repository_ref"].strip()) and not data["repository_url"].strip()
        if lone_ref:
            form.add_error("repository_ref", "a branch, tag or commit needs a repository URL; clear it, or fill in the URL above")
        try:
            contract, proposer = run_inputs(
                data["template"],
                data["contract"],
                data["proposer_kind"],
                data["proposer_options"],
                data["repository_url"],
                data["repository_ref"],
                data["agent_preset"],
                data["model"],
            )
            if lone_ref:
                check_run(contract, proposer, request.user, project=data["project"] or None)
            else:
                run, connection = start_run(contract, proposer, request.user, project=data["project"] or None)
                if connection is None:
                    return redirect("runs:detail", run.pk)
                # Its token, once: this answer is the only place it is ever shown (never_cache:
                # no cache keeps it either). The run's page does not have it.
                return render(request, "runs/connect.html", {"run": run, "connection": connection}, status=201)
        except InputError as exc:
            form.add_problems(exc)
    status = 400 if form.is_bound else 200
    return render(request, "runs/new.html", {"form": form, "templates": template_documents()}, status=status)
