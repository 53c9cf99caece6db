"""Showing what changed between two policy versions."""

from __future__ import annotations

import difflib
import json

from approvals.models import PolicyVersion


def pretty(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True)


SELF_APPROVAL_ON = "!! SELF-APPROVAL TURNED ON: whoever starts a run may approve its requests alone, with no second person.\n"
SELF_APPROVAL_OFF = "!! Self-approval turned off: another reviewer must decide each request again.\n"


def self_approval_change(old: dict | None, new: dict) -> str:
    """A marker line when a change turns self-approval on or off, else ""."""
    before = bool((old or {}).get("allow_self_approval", False))
    after = bool(new.get("allow_self_approval", False))
    if before == after:
        return ""
    return SELF_APPROVAL_ON if after else SELF_APPROVAL_OFF


def version_diff(old: PolicyVersion | None, new: PolicyVersion) -> str:
    before = pretty(old.document).splitlines(keepends=True) if old else []
    after = pretty(new.document).splitlines(keepends=True)
    name_old = f"policy v{old.version}" if old else "(none)"
    diff = "".join(difflib.unified_diff(before, after, name_old, f"policy v{new.version}"))
    # Separation of duties is the one setting that removes a person from the loop:
    # its change heads the diff, so nobody reads past it.
    return self_approval_change(old.document if old else None, new.document) + diff


def previous_of(version: PolicyVersion) -> PolicyVersion | None:
    """The version before, in the same project: versions count within a project."""
    return PolicyVersion.objects.filter(project=version.project, version__lt=version.version).order_by("-version").first()
