"""Starting a run from the browser: a contract from a template in ``examples/`` or
pasted, and a proposer. Refused input comes back with every offending field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from common.permissions import ADD_RUNS
from core.errors import FieldProblem, InputError, json_message
from pages.access import require
from projects.access import default_start_slug, projects_with
from runs.proposers import PROPOSER_KINDS
from runs.runtime import check_run, create_run

# Which form field shows the problems of each kind of refused input.
FIELD_FOR = {
    "project": "project",
    "proposer.kind": "proposer_kind",
    "template": "template",
    "contract": "contract",
    "workspace": "contract",
    "proposer": "proposer_options",
    "script": "proposer_options",
}
# A repository named in the form replaces the contract's workspace.
REPOSITORY_FIELDS = {"workspace.url": "repository_url", "workspace.ref": "repository_ref"}


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
    template: str, contract_text: str, kind: str, options_text: str, repository_url: str = "", repository_ref: str = ""
) -> tuple[Any, dict[str, Any]]:
    """The contract and proposer configuration the form describes. The contract box
    wins over the template; a scripted proposer without options uses the
    template's proposals.json; a repository URL (and ref) makes the workspace a
    clone of that remote."""
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
    proposer_options = forms.CharField(
        required=False,
        label="Proposer options (JSON object)",
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "code"}),
        help_text='For example {"script": [...]} for the scripted proposer. Empty: the template\'s proposals.json.',
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
        cast(forms.ChoiceField, self.fields["proposer_kind"]).choices = [(kind, kind) for kind in PROPOSER_KINDS]

    def add_problems(self, exc: InputError) -> None:
        for problem in exc.problems:
            # A new run's problems are named "contract.…" or "proposer.…"; the box's
            # label says which, so the message names the field inside its JSON.
            head, _, inner = problem.field.partition(".")
            head = head.split("[", 1)[0]
            field = FIELD_FOR.get(problem.field) or FIELD_FOR.get(exc.what) or FIELD_FOR.get(head)
            if self["repository_url"].value():
                # The workspace came from the repository fields: its problems belong there.
                field = REPOSITORY_FIELDS.get(problem.field.removeprefix("contract."), field)
            if problem.field.startswith("(") or problem.field == head or field == "proposer_kind":
                self.add_error(field, problem.message)
            else:
                # A workspace problem is named from the contract's top ("workspace.url").
                shown = problem.field if exc.what == "workspace" else inner or problem.field
                self.add_error(field, f"{shown}: {problem.message}")


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
            )
            if lone_ref:
                check_run(contract, proposer, request.user, project=data["project"] or None)
            else:
                return redirect("runs:detail", create_run(contract, proposer, request.user, project=data["project"] or None).pk)
        except InputError as exc:
            form.add_problems(exc)
    status = 400 if form.is_bound else 200
    return render(request, "runs/new.html", {"form": form, "templates": template_documents()}, status=status)
