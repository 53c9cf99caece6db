"""The admin's row editor for a policy: a main form (approval TTL, self-approval,
budget, sandbox, the publish checks) and formsets for rules and checks. The forms only convert text to
values; what a valid policy is stays with ``core.policy.check_policy``, whose
problems are put back on the field or row they name."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.conf import settings

from common.row_labels import name_row_fields
from core.errors import FieldProblem, InputError
from core.policy import check_policy

DECISIONS = [("allow", "allow"), ("deny", "deny"), ("ask", "ask")]
RUNTIMES = [("runc", "runc (the engine's default)"), ("runsc", "runsc (gVisor: a user-space kernel)")]
SECRET_ACTIONS = [("refuse", "refuse the publish (the model is told file and line)"), ("ask", "ask a reviewer, showing the findings")]
MOVED_BASE = [("show", "show it to the reviewer"), ("stale", "make the approval stale")]
HIDDEN_CHARACTERS = [("show", "mark them and name them above the diff"), ("refuse", "refuse the publish (the model is told file and line)")]
BUDGET_FIELDS = ("max_proposals", "max_tool_calls", "max_attempts", "wall_time_seconds", "max_output_bytes_per_call")
_ROW_PATH = re.compile(r"^(rules|checks)\[(\d+)\](?:\.(\w+))?")


class PolicyMainForm(forms.Form):
    note = forms.CharField(max_length=300, required=False)
    approval_ttl_seconds = forms.IntegerField(label="Approval TTL (seconds)")
    max_wait_seconds = forms.IntegerField(
        label="Limit on waiting (seconds)", required=False, help_text="total time one run may wait for reviewers; empty for no limit"
    )
    allow_self_approval = forms.BooleanField(
        required=False,
        help_text="Warning: lets whoever starts a run approve its own requests, with no second person. "
        "Turning it on is recorded in the version diff and on every self-approved decision.",
    )
    trace_values = forms.BooleanField(
        required=False,
        label="Arguments and results in traces",
        help_text="Lets the runs' OpenTelemetry traces carry their calls' arguments and results (masked, clipped); "
        "without it a trace names tools, rules, decisions and people only.",
    )
    budget_max_proposals = forms.IntegerField(label="Max proposals")
    budget_max_tool_calls = forms.IntegerField(label="Max tool calls")
    budget_max_attempts = forms.IntegerField(label="Max attempts")
    budget_wall_time_seconds = forms.IntegerField(label="Wall time (seconds)")
    budget_max_output_bytes_per_call = forms.IntegerField(label="Max output bytes per call")
    sandbox_memory = forms.CharField(label="Sandbox memory", help_text="e.g. 512m, 2g")
    sandbox_cpus = forms.FloatField(label="Sandbox CPUs")
    sandbox_pids_limit = forms.IntegerField(label="Sandbox pids limit")
    sandbox_workspace_max_mb = forms.IntegerField(
        label="Workspace quota (MB)", help_text="how large the workspace may grow before no check runs in it"
    )
    sandbox_scratch_mb = forms.IntegerField(label="Scratch (MB)", help_text="the tmpfs checks write to; counts against memory")
    # Not a ChoiceField: check_policy judges the value and names the field.
    sandbox_runtime = forms.CharField(label="Sandbox runtime", initial="runc", widget=forms.Select(choices=RUNTIMES))
    publish_secrets = forms.CharField(label="Secrets found in a publish", initial="refuse", widget=forms.Select(choices=SECRET_ACTIONS))
    publish_allowed_secrets = forms.CharField(
        label="Allowed secret findings",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="known false positives, one per line as file#fingerprint (the fingerprint as a finding shows it)",
    )
    publish_moved_base = forms.CharField(label="Base branch moved", initial="show", widget=forms.Select(choices=MOVED_BASE))
    publish_hidden_characters = forms.CharField(
        label="Hidden characters added",
        initial="show",
        widget=forms.Select(choices=HIDDEN_CHARACTERS),
        help_text="bidirectional controls, zero-width, tag or control characters in a line the change adds",
    )

    def clean_publish_allowed_secrets(self) -> list[dict[str, str]]:
        allowed = []
        for line in str(self.cleaned_data.get("publish_allowed_secrets", "")).splitlines():
            if not line.strip():
                continue
            path, mark, fingerprint = line.strip().rpartition("#")
            if not mark or not path:
                raise forms.ValidationError(f"{line.strip()!r} is not file#fingerprint")
            allowed.append({"path": path, "fingerprint": fingerprint})
        return allowed

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not settings.HARNESS_ALLOW_SELF_APPROVAL:
            # The deployment decides (approvals.policies.self_approval_on): the box is
            # shown off and fixed, also for a version made from one saved with it on.
            field = self.fields["allow_self_approval"]
            field.disabled = True
            field.help_text = (
                "Not permitted on this deployment (HARNESS_ALLOW_SELF_APPROVAL is off): another reviewer decides every request."
            )
            self.initial["allow_self_approval"] = False


class RuleForm(forms.Form):
    name = forms.CharField(required=False, widget=forms.TextInput(attrs={"class": "vTextField"}))
    tool = forms.CharField(required=False, help_text="tool name or glob", widget=forms.TextInput(attrs={"size": 14}))
    # Not a ChoiceField: check_policy judges the value and names the field.
    decision = forms.CharField(initial="allow", widget=forms.Select(choices=DECISIONS))
    requires_evidence = forms.BooleanField(required=False)
    when = forms.CharField(
        label="Argument constraints",
        required=False,
        help_text="one per line: arg=glob1,glob2",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 30}),
    )

    # Not checked here: check_policy judges the value and names the field.
    version = forms.CharField(
        label="Tool version",
        required=False,
        help_text="only this version (as an approval page shows it); empty for any",
        widget=forms.TextInput(attrs={"size": 16}),
    )

    reviewers = forms.CharField(
        label="Reviewers",
        required=False,
        help_text="who decides an ask, one per line: count=2, users=ana,bo, groups=release; empty: any one of the project's reviewers",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 24}),
    )

    def clean_reviewers(self) -> dict[str, Any]:
        reviewers: dict[str, Any] = {}
        for line in self.cleaned_data["reviewers"].splitlines():
            if not line.strip():
                continue
            key, sep, value = (part.strip() for part in line.partition("="))
            if not sep or key not in ("count", "users", "groups"):
                raise forms.ValidationError(f"{line.strip()!r}: each line must be count=N, users=name,name or groups=name,name")
            if key in reviewers:
                raise forms.ValidationError(f"{key} is given twice")
            if key == "count":
                if not value.isdigit():
                    raise forms.ValidationError(f"count={value}: the number of distinct people who must grant, a whole number")
                reviewers[key] = int(value)
            else:
                reviewers[key] = [name.strip() for name in value.split(",") if name.strip()]
        return reviewers

    def clean_when(self) -> dict[str, list[str]]:
        when: dict[str, list[str]] = {}
        for line in self.cleaned_data["when"].splitlines():
            if not line.strip():
                continue
            arg, sep, globs = line.partition("=")
            arg = arg.strip()
            if not sep or not arg:
                raise forms.ValidationError(f"{line.strip()!r}: each line must look like arg=glob1,glob2")
            if arg in when:
                raise forms.ValidationError(f"argument {arg!r} is constrained twice")
            when[arg] = [g.strip() for g in globs.split(",") if g.strip()]
        return when


class CheckForm(forms.Form):
    check_id = forms.CharField(required=False, widget=forms.TextInput(attrs={"size": 12}))
    command = forms.CharField(
        required=False,
        help_text="one argv item per line",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 30}),
    )
    version = forms.CharField(initial="1", required=False, widget=forms.TextInput(attrs={"class": "vIntegerField"}))
    timeout_seconds = forms.IntegerField(initial=120, required=False, widget=forms.NumberInput(attrs={"class": "vIntegerField"}))
    image = forms.CharField(required=False, widget=forms.TextInput(attrs={"size": 20}))
    on_copy = forms.BooleanField(required=False, label="On a copy", help_text="runs in a throwaway copy of the workspace")
    egress = forms.CharField(
        required=False,
        label="Network",
        help_text="host:port per line",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 16}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The box shows every argv item and the longest one whole.
        lines = str(self.initial.get("command") or "").splitlines() or [""]
        self.fields["command"].widget.attrs.update(rows=max(3, len(lines) + 1), cols=max(30, min(100, max(map(len, lines)) + 2)))

    def clean_command(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["command"].splitlines() if line.strip()]

    def clean_egress(self) -> list[dict[str, Any]]:
        """The destinations as the policy keeps them; the policy checks each name."""
        destinations: list[dict[str, Any]] = []
        for line in self.cleaned_data["egress"].splitlines():
            if not line.strip():
                continue
            host, sep, port = line.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise forms.ValidationError(f"{line.strip()!r}: each line must look like host:port")
            destinations.append({"host": host, "port": int(port)})
        return destinations


class Rows(forms.BaseFormSet):
    """A table of rows whose column headings label no field (common.row_labels)."""

    noun = "row"

    def add_fields(self, form: forms.Form, index: int | None) -> None:
        super().add_fields(form, index)
        name_row_fields(form, self.noun, index)


class RuleRows(Rows):
    noun = "rule"

    def add_fields(self, form: forms.Form, index: int | None) -> None:
        super().add_fields(form, index)
        form.fields["ORDER"].widget.attrs["class"] = "vIntegerField"


class CheckRows(Rows):
    noun = "check"


RuleFormSet = forms.formset_factory(RuleForm, formset=RuleRows, extra=3, can_delete=True, can_order=True)
CheckFormSet = forms.formset_factory(CheckForm, formset=CheckRows, extra=2, can_delete=True)


def initial_data(document: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    budget = document.get("budget", {})
    sandbox = document.get("sandbox", {})
    publish = document.get("publish_checks", {})
    main = {
        "approval_ttl_seconds": document.get("approval_ttl_seconds", 3600),
        "max_wait_seconds": document.get("max_wait_seconds"),
        "allow_self_approval": document.get("allow_self_approval", False),
        "trace_values": document.get("trace_values", False),
        **{f"budget_{name}": budget.get(name) for name in BUDGET_FIELDS},
        "sandbox_memory": sandbox.get("memory", "512m"),
        "sandbox_cpus": sandbox.get("cpus", 1.0),
        "sandbox_pids_limit": sandbox.get("pids_limit", 128),
        "sandbox_workspace_max_mb": sandbox.get("workspace_max_mb", 1024),
        "sandbox_scratch_mb": sandbox.get("scratch_mb", 256),
        "sandbox_runtime": sandbox.get("runtime", "runc"),
        "publish_secrets": publish.get("secrets", "refuse"),
        "publish_allowed_secrets": "\n".join(f"{a['path']}#{a['fingerprint']}" for a in publish.get("allowed_secrets", [])),
        "publish_moved_base": publish.get("moved_base", "show"),
        "publish_hidden_characters": publish.get("hidden_characters", "show"),
    }
    rules = [
        {
            "name": rule.get("name", ""),
            "tool": rule.get("tool", ""),
            "decision": rule.get("decision", "allow"),
            "requires_evidence": rule.get("requires_evidence", False),
            "when": "\n".join(f"{arg}={','.join(globs)}" for arg, globs in rule.get("when", {}).items()),
            "version": rule.get("version") or "",
            "reviewers": reviewer_lines(rule.get("reviewers") or {}),
        }
        for rule in document.get("rules", [])
    ]
    checks = [
        {
            "check_id": check.get("check_id", ""),
            "command": "\n".join(check.get("command", [])),
            "version": check.get("version", "1"),
            "timeout_seconds": check.get("timeout_seconds", 120),
            "image": check.get("image") or "",
            "on_copy": check.get("on_copy", False),
            "egress": "\n".join(f"{d.get('host', '')}:{d.get('port', '')}" for d in check.get("egress", [])),
        }
        for check in document.get("checks", [])
    ]
    return main, rules, checks


def reviewer_lines(reviewers: dict[str, Any]) -> str:
    """A rule's reviewers as the row editor's lines, the default (any one reviewer) as none."""
    lines = [f"count={reviewers['count']}"] if reviewers.get("count", 1) != 1 else []
    lines += [f"{key}={','.join(reviewers[key])}" for key in ("users", "groups") if reviewers.get(key)]
    return "\n".join(lines)


# What a row field whose text could not be converted stands for while the policy is
# judged as a whole: a value the policy accepts, so its one problem is named once.
ROW_FALLBACKS: dict[str, Any] = {"when": {}, "reviewers": {}, "timeout_seconds": None, "egress": [], "ORDER": None}


def kept_forms(formset: forms.BaseFormSet) -> list[Any]:
    """The rows that make the document, valid or not: neither deleted nor untouched
    extras; rules in their chosen order (unnumbered last), as Django orders them."""
    formset.is_valid()  # cleans every row, so each has its cleaned_data
    kept = [form for form in formset.forms if form.cleaned_data and not form.cleaned_data.get("DELETE")]
    if formset.can_order:
        kept.sort(key=lambda form: (form.cleaned_data.get("ORDER") is None, form.cleaned_data.get("ORDER") or 0))
    return kept


def row_values(form: forms.Form) -> dict[str, Any]:
    return {**ROW_FALLBACKS, **form.cleaned_data}


def main_values(main: PolicyMainForm, base: dict[str, Any]) -> dict[str, Any]:
    """The main form's values, those it could not convert taken from ``base``."""
    initial, _, _ = initial_data(base)
    allowed = base.get("publish_checks", {}).get("allowed_secrets", [])
    fallback = {**initial, "note": "", "publish_allowed_secrets": [{"path": a["path"], "fingerprint": a["fingerprint"]} for a in allowed]}
    return {**fallback, **main.cleaned_data}


def duplicate_checks(check_rows: list[dict[str, Any]]) -> list[FieldProblem]:
    """A check id given to a second row, named on that row with the first row's number."""
    first: dict[str, int] = {}
    problems = []
    for index, row in enumerate(check_rows):
        check_id = row.get("check_id")
        if check_id in first:
            problems.append(FieldProblem(f"checks[{index}].check_id", f"{check_id!r} is already the id of check row {first[check_id] + 1}"))
        elif check_id:
            first[check_id] = index
    return problems


def compose(
    data: dict[str, Any], rule_rows: list[dict[str, Any]], check_rows: list[dict[str, Any]], base: dict[str, Any]
) -> dict[str, Any]:
    """The policy document (without its version) from the forms' values, rows in order."""
    rules = []
    for row in rule_rows:
        rule: dict[str, Any] = {"name": row["name"], "tool": row["tool"], "decision": row["decision"]}
        if row["when"]:
            rule["when"] = row["when"]
        if row["requires_evidence"]:
            rule["requires_evidence"] = True
        if row["version"]:
            rule["version"] = row["version"]
        if row["reviewers"]:
            rule["reviewers"] = row["reviewers"]
        rules.append(rule)
    checks = []
    for row in check_rows:
        check: dict[str, Any] = {"check_id": row["check_id"], "command": row["command"], "version": row["version"] or "1"}
        if row["timeout_seconds"] is not None:
            check["timeout_seconds"] = row["timeout_seconds"]
        if row["image"]:
            check["image"] = row["image"]
        if row["on_copy"]:
            check["on_copy"] = True
        if row["egress"]:
            check["egress"] = row["egress"]
        checks.append(check)
    return {
        "rules": rules,
        "checks": checks,
        "budget": {name: data[f"budget_{name}"] for name in BUDGET_FIELDS},
        "approval_ttl_seconds": data["approval_ttl_seconds"],
        **({"max_wait_seconds": data["max_wait_seconds"]} if data["max_wait_seconds"] is not None else {}),
        "allow_self_approval": data["allow_self_approval"],
        # Edited in the raw JSON editor; the row editor keeps it as it was.
        **({"read_only_tools": base["read_only_tools"]} if base.get("read_only_tools") else {}),
        **({"trace_values": True} if data["trace_values"] else {}),
        "sandbox": {
            **base.get("sandbox", {}),
            "memory": data["sandbox_memory"],
            "cpus": data["sandbox_cpus"],
            "pids_limit": data["sandbox_pids_limit"],
            "workspace_max_mb": data["sandbox_workspace_max_mb"],
            "scratch_mb": data["sandbox_scratch_mb"],
            "runtime": data["sandbox_runtime"],
        },
        **publish_checks(data, base),
    }


def publish_checks(data: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The document's ``publish_checks`` from the main form; left out while it says
    what the defaults say and the base document had none, so a save that changes
    something else adds nothing here."""
    # An allowed finding keeps the reason the document gave it (the form edits file#fingerprint only).
    reasons = {(a.get("path"), a.get("fingerprint")): a for a in base.get("publish_checks", {}).get("allowed_secrets", [])}
    checks = {
        "secrets": data["publish_secrets"],
        "allowed_secrets": [{**reasons.get((a["path"], a["fingerprint"]), {}), **a} for a in data["publish_allowed_secrets"]],
        "moved_base": data["publish_moved_base"],
        "hidden_characters": data["publish_hidden_characters"],
    }
    if "publish_checks" not in base and checks == {
        "secrets": "refuse",
        "allowed_secrets": [],
        "moved_base": "show",
        "hidden_characters": "show",
    }:
        return {}
    return {"publish_checks": checks}


def judged_document(
    main: PolicyMainForm, rules: forms.BaseFormSet, checks: forms.BaseFormSet, base: dict[str, Any]
) -> dict[str, Any] | None:
    """The policy document the posted forms make, or None with every problem put on
    the field or row it names. The policy is judged even when some text did not
    convert (standing in for it: ``base``'s value or a neutral one), so one answer
    names every problem."""
    converted = all([main.is_valid(), rules.is_valid(), checks.is_valid()])
    rule_forms = kept_forms(rules)
    check_forms = kept_forms(checks)
    check_rows = [row_values(form) for form in check_forms]
    document = compose(main_values(main, base), [row_values(form) for form in rule_forms], check_rows, base)
    try:
        check_policy({**document, "version": 1})
        problems = []
    except InputError as exc:
        problems = exc.problems
    # Named on the repeated row; the policy's own message ("checks: ...") would not say which.
    repeated = duplicate_checks(check_rows)
    problems = [p for p in problems if not (repeated and p.field == "checks")] + repeated
    place_problems(problems, main, rule_forms, check_forms)
    return document if converted and not problems else None


def place_problems(problems: list[FieldProblem], main: PolicyMainForm, rule_forms: list[RuleForm], check_forms: list[CheckForm]) -> None:
    """Put each problem ("rules[1].decision: ...") on the row field it names, else on the main form."""
    for problem in problems:
        match = _ROW_PATH.match(problem.field)
        if match:
            rows = rule_forms if match.group(1) == "rules" else check_forms
            index, name = int(match.group(2)), match.group(3)
            if index < len(rows):
                form = rows[index]
                form.add_error(*((name, problem.message) if name in form.fields else (None, str(problem))))
                continue
        name = problem.field.replace(".", "_")
        main.add_error(*((name, problem.message) if name in main.fields else (None, str(problem))))


def error_summary(main: PolicyMainForm, rules: forms.BaseFormSet, checks: forms.BaseFormSet) -> list[str]:
    """Every refusal on the page, each with the field it is about as the page labels
    it, so a long form says at its top what to fix and where."""
    lines = [str(error) for error in main.non_field_errors()]
    lines += [f"{field.label}: {error}" for field in main for error in field.errors]
    for heading, formset in (("Rule", rules), ("Check", checks)):
        lines += [str(error) for error in formset.non_form_errors()]
        for row, form in enumerate(formset.forms, start=1):
            lines += [f"{heading} row {row}: {error}" for error in form.non_field_errors()]
            lines += [f"{heading} row {row}, {field.label.lower()}: {error}" for field in form for error in field.errors]
    return lines
