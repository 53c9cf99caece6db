"""Policy versions in the Django admin. Versions are immutable: "add" starts from the
newest document (or from any version: "new version from this one") and saves a new
version; a version's page shows its difference from the one before; any two versions
are compared side by side, in colour, at a GET URL that can be shared.

Policies are a project's: versions count, and are compared, within one project. A
project's admins see and edit its versions alone; site admins all (projects.access).
A page names its project with ``?project=<slug>`` (else the only project where the
user may do what it does, else the default project); another project's answers 404,
as one that does not exist.

Registered here rather than in approvals: saving a version ends the waits it makes
stale at once (docs/design.md, Approvals), which is runs' orchestration
(runs.approval_flow.flow.save_policy_version), and a runtime the policy names is asked of
the sandbox engine; both are above approvals."""

from __future__ import annotations

import json
import logging
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from approvals.models import PolicyVersion
from approvals.policies import SELF_APPROVAL_NOT_PERMITTED, current_policy_row
from approvals.policy_diff import SELF_APPROVAL_ON, pretty, previous_of, self_approval_change, version_diff
from approvals.policy_editor import (
    CheckFormSet,
    PolicyMainForm,
    RuleFormSet,
    error_summary,
    initial_data,
    judged_document,
    place_problems,
)
from common.permissions import ADD_POLICIES, VIEW_POLICIES
from common.times import zoned_times
from core.errors import FieldProblem, InputError, json_message
from core.policy import check_policy
from projects.access import permissions_in, project_ids_with, projects_with, scoped
from projects.models import DEFAULT_PROJECT, Project
from runs.approval_flow.flow import save_policy_version
from sandbox.public import ENGINE_ERRORS, RuntimeMissing, check_runtime, shared_client

log = logging.getLogger(__name__)


def policy_project(request: HttpRequest, permission: str) -> Project:
    """The project whose policies the page is about (``?project=<slug>``, else the only
    project where the user holds ``permission``, else the default project); 404 for
    one where they do not hold it, the same answer as for one that does not exist."""
    slug = request.GET.get("project", "")
    if not slug:
        ids = project_ids_with(request.user, permission)
        only = Project.objects.filter(pk=ids[0]).first() if ids is not None and len(ids) == 1 else None
        slug = only.slug if only is not None else DEFAULT_PROJECT
    project = Project.objects.filter(slug=slug).first()
    if project is None or permission not in permissions_in(request.user, project.pk):
        raise Http404(f"there is no project {slug!r}")
    return project


class PolicyProjectFilter(admin.SimpleListFilter):
    """By project, offering only the projects whose policies the user may see."""

    title = "project"
    parameter_name = "project__slug"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(project.slug, project.slug) for project in projects_with(request.user, VIEW_POLICIES)]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        return queryset.filter(project__slug=self.value()) if self.value() else queryset


class PolicyVersionForm(forms.ModelForm):
    document_text = forms.CharField(
        label="Policy (JSON)",
        widget=forms.Textarea(attrs={"rows": 36, "cols": 110}),
        help_text="rules (first match wins; no match denies), checks, budget, approval TTL, sandbox limits",
    )

    class Meta:
        model = PolicyVersion
        fields = ["note"]

    def clean_document_text(self) -> dict[str, Any]:
        text = self.cleaned_data["document_text"]
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(json_message(exc)) from None
        if not isinstance(raw, dict):
            raise forms.ValidationError("the policy must be a JSON object")
        raw.pop("version", None)
        try:
            check_policy({**raw, "version": 1})
        except InputError as exc:
            raise forms.ValidationError([str(p) for p in exc.problems]) from None
        if raw.get("allow_self_approval") and not settings.HARNESS_ALLOW_SELF_APPROVAL:
            raise forms.ValidationError(f"allow_self_approval: {SELF_APPROVAL_NOT_PERMITTED}")
        return raw


@admin.register(PolicyVersion)
@zoned_times(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    """The policy versions' pages, with what a version means for runs: how many started
    under it, and a save that ends the waits it makes stale."""

    form = PolicyVersionForm
    list_display = ("project", "version", "new_from_this", "note", "created_by", "created_at", "run_count")
    list_filter = (PolicyProjectFilter,)
    actions = ["compare_versions"]
    readonly_fields = ("project", "version", "note", "created_by", "created_at", "document_pretty", "difference")

    def run_count(self, obj: PolicyVersion) -> int:
        return obj.runs.count()

    def store_version(self, row: PolicyVersion, document: dict[str, Any]) -> list[str]:
        return save_policy_version(row, document)

    def engine_problems(self, document: dict[str, Any]) -> list[FieldProblem]:
        runtime = document.get("sandbox", {}).get("runtime", "runc")
        try:
            check_runtime(shared_client(), runtime)
        except RuntimeMissing as exc:
            return [FieldProblem("sandbox.runtime", exc.reason)]
        except ENGINE_ERRORS as exc:
            # No engine to ask now: the save goes ahead; a run names a missing runtime when it starts.
            log.warning("could not ask the sandbox engine for runtime %r (%s)", runtime, exc)
        return []

    @admin.display(description="edit")
    def new_from_this(self, obj: PolicyVersion) -> str:
        url = reverse("admin:approvals_policyversion_add")
        return format_html('<a href="{}?project={}&amp;from={}">new version from v{}</a>', url, obj.project.slug, obj.version, obj.version)

    def get_queryset(self, request: HttpRequest) -> Any:
        # The versions of the user's projects alone: another project's is not found.
        return scoped(super().get_queryset(request), request.user, VIEW_POLICIES).select_related("project")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Without an object: in some project (a list scoped to those); with one: in its project.
        return request.user.has_perm(VIEW_POLICIES, obj)

    def get_urls(self) -> list[Any]:
        compare = path("compare/", self.admin_site.admin_view(self.compare_view), name="approvals_policyversion_compare")
        return [compare, *super().get_urls()]

    def base_document(self, request: HttpRequest) -> tuple[int, dict[str, Any]]:
        """The version a new one starts from: ``?from=N`` of the project, else its newest."""
        project = policy_project(request, ADD_POLICIES)
        wanted = request.GET.get("from", "")
        versions = PolicyVersion.objects.filter(project=project)
        row = versions.filter(version=int(wanted)).first() if wanted.isdigit() else current_policy_row(project.pk)
        if row is None:
            raise Http404(f"there is no policy v{wanted}")
        document = dict(row.document)
        document.pop("version", None)
        return row.version, document

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # versions are immutable; a change is a new version

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # runs refer to the version they started with

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ("note", "document_text")
        return self.readonly_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"document_text": pretty(self.base_document(request)[1])}

    @admin.display(description="document")
    def document_pretty(self, obj: PolicyVersion) -> str:
        return format_html('<pre tabindex="0">{}</pre>', pretty(obj.document))

    @admin.display(description="difference from the previous version")
    def difference(self, obj: PolicyVersion) -> str:
        return format_html('<pre tabindex="0">{}</pre>', version_diff(previous_of(obj), obj) or "(no difference)")

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Rows for rules and checks; ``?json=1`` (or a posted ``document_text``) is the raw JSON editor."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        if "project" not in request.GET:
            choices = list(projects_with(request.user, ADD_POLICIES))
            if len(choices) > 1:
                # Several projects' policies are theirs: which one is asked, not guessed.
                context = {**self.admin_site.each_context(request), "title": "Add policy version", "opts": self.model._meta}
                return TemplateResponse(request, "admin/approvals/policy_project.html", {**context, "choices": choices})
        # Before either editor: someone who may not add to the project is answered 404.
        project = policy_project(request, ADD_POLICIES)
        if request.GET.get("json") or "document_text" in request.POST:
            return super().add_view(request, form_url, {**(extra_context or {}), "subtitle": f"{project.slug}: advanced, raw JSON"})
        start, base = self.base_document(request)
        main_initial, rules_initial, checks_initial = initial_data(base)
        if request.method == "POST":
            main = PolicyMainForm(request.POST)
            rules = RuleFormSet(request.POST, prefix="rules")
            checks = CheckFormSet(request.POST, prefix="checks")
            document = judged_document(main, rules, checks, base)
            missing = self.engine_problems(document) if document is not None else []
            if missing:
                place_problems(missing, main, [], [])
            elif document is not None:
                obj = PolicyVersion(project=project, note=main.cleaned_data["note"])
                self.save_version(request, obj, document)
                self.log_addition(request, obj, [{"added": {}}])
                self.message_user(request, f"Saved {obj}.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:approvals_policyversion_change", args=[obj.pk]))
        else:
            main = PolicyMainForm(initial=main_initial)
            rules = RuleFormSet(initial=rules_initial, prefix="rules")
            checks = CheckFormSet(initial=checks_initial, prefix="checks")
        context = {
            **self.admin_site.each_context(request),
            **(extra_context or {}),
            "title": "Add policy version",
            "subtitle": f"{project.slug}: starting from v{start}",
            "opts": self.model._meta,
            "main_form": main,
            "rules": rules,
            "checks": checks,
            "refused": request.method == "POST",
            "problems": error_summary(main, rules, checks) if request.method == "POST" else [],
        }
        return TemplateResponse(request, "admin/approvals/policy_edit.html", context)

    def save_model(self, request: HttpRequest, obj: PolicyVersion, form: Any, change: bool) -> None:
        obj.project = policy_project(request, ADD_POLICIES)
        self.save_version(request, obj, form.cleaned_data["document_text"])

    def save_version(self, request: HttpRequest, obj: PolicyVersion, document: dict[str, Any]) -> None:
        """Every way the admin saves a version goes through ``store_version``, which
        makes the requests it turns stale end their waits."""
        obj.created_by = cast(User, request.user)  # the admin site admits only signed-in staff
        stale = self.store_version(obj, document)
        if stale:
            self.message_user(
                request,
                f"{len(stale)} pending request(s) were asked under an older version: they are out of date now, "
                "and their runs go back through the gates under this one.",
                messages.INFO,
            )
        previous = previous_of(obj)
        if self_approval_change(previous.document if previous else None, obj.document) == SELF_APPROVAL_ON:
            self.message_user(request, SELF_APPROVAL_ON.removeprefix("!! ").strip(), messages.WARNING)

    @admin.action(description="Compare two selected versions")
    def compare_versions(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        chosen = list(queryset.order_by("version"))
        if len(chosen) != 2:
            self.message_user(request, "Select exactly two versions to compare.", messages.WARNING)
            return None
        if chosen[0].project_id != chosen[1].project_id:
            self.message_user(request, "Select two versions of one project: versions are compared within a project.", messages.WARNING)
            return None
        url = reverse("admin:approvals_policyversion_compare")
        return HttpResponseRedirect(f"{url}?project={chosen[0].project.slug}&old={chosen[0].version}&new={chosen[1].version}")

    def compare_view(self, request: HttpRequest) -> HttpResponse:
        """``?project=<slug>&old=N&new=M``: two versions of the project side by side, changes coloured."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        project = policy_project(request, VIEW_POLICIES)
        versions = {row.version: row for row in PolicyVersion.objects.filter(project=project).order_by("version")}
        picked = []
        for name in ("old", "new"):
            text = request.GET.get(name, "")
            if not text.isdigit() or int(text) not in versions:
                raise Http404(f"{name}: there is no policy version {text!r}")
            picked.append(versions[int(text)])
        old, new = picked
        context = {
            **self.admin_site.each_context(request),
            "title": f"Policy v{old.version} → v{new.version}",
            "subtitle": f"project {project.slug}",
            "project": project,
            "may_add": ADD_POLICIES in permissions_in(request.user, project.pk),
            "old": old,
            "new": new,
            "versions": list(versions),
            "diff": version_diff(old, new),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/approvals/policy_compare.html", context)
