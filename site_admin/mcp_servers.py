"""A project's MCP servers in the Django admin (docs/design.md, Outside tools): site admins
alone add, change and remove them, each change in the project's audit. The form
checks what a worker would refuse later: the URL against HARNESS_MCP_ALLOWED_URLS,
the credential as the name of an environment variable (never a token)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from core.mcp import SERVER_NAME, TOOL_NAME
from projects.admin_scope import SiteAdminsOnly
from projects.audit import record
from projects.models import McpServer
from runs.mcp_servers import check_mcp_url
from sandbox.public import UnsafeURL

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
AUDITED = ("name", "url", "command", "credential_env", "idempotency_arg", "lookup_tool", "timeout_seconds", "max_response_mb", "enabled")


class McpServerForm(forms.ModelForm):
    url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="Its streamable HTTP endpoint; must be on HARNESS_MCP_ALLOWED_URLS. Empty for a server over stdio.",
    )

    class Meta:
        model = McpServer
        fields = ["project", *AUDITED]

    def clean_name(self) -> str:
        name = str(self.cleaned_data["name"])
        if not SERVER_NAME.match(name):
            raise forms.ValidationError("1 to 40 lowercase letters, digits, '_' or '-', starting with a letter")
        return name

    def clean_url(self) -> str:
        url = str(self.cleaned_data["url"] or "")
        try:
            if url:
                check_mcp_url(url)
        except UnsafeURL as exc:
            raise forms.ValidationError(str(exc)) from None
        return url

    def clean_command(self) -> list[str]:
        command = self.cleaned_data["command"] or []
        if not isinstance(command, list) or not all(isinstance(part, str) and part for part in command):
            raise forms.ValidationError('a JSON list of non-empty strings, e.g. ["/opt/harness-mcp/bin/workspace-search"]')
        return command

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # Exactly one transport: a URL reached from the worker, or a command run in the sandbox.
        if bool(cleaned.get("url")) == bool(cleaned.get("command")) and not self.errors:
            raise forms.ValidationError("give either a URL (streamable HTTP) or a command (stdio in the sandbox), not both or neither")
        return cleaned

    def clean_credential_env(self) -> str:
        name = str(self.cleaned_data["credential_env"])
        if name and not ENV_NAME.match(name):
            raise forms.ValidationError("the name of an environment variable (A-Z, 0-9, '_'), not the token itself")
        return name

    def _tool_name(self, field: str) -> str:
        value = str(self.cleaned_data[field])
        if value and not TOOL_NAME.match(value):
            raise forms.ValidationError("1 to 59 letters, digits, '_' or '-'")
        return value

    def clean_idempotency_arg(self) -> str:
        return self._tool_name("idempotency_arg")

    def clean_lookup_tool(self) -> str:
        return self._tool_name("lookup_tool")


@admin.register(McpServer)
class McpServerAdmin(SiteAdminsOnly, admin.ModelAdmin):
    form = McpServerForm
    list_display = ("name", "project", "url", "enabled")
    list_filter = ("project", "enabled")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        record(obj.project, request.user, "mcp_server_saved", **{name: getattr(obj, name) for name in AUDITED})

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        project, name = obj.project, obj.name
        super().delete_model(request, obj)
        record(project, request.user, "mcp_server_removed", name=name)
