"""Showing what changed between two policy versions."""

from __future__ import annotations

import difflib
import json

from approvals.models import PolicyVersion


def pretty(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True)


def version_diff(old: PolicyVersion | None, new: PolicyVersion) -> str:
    before = pretty(old.document).splitlines(keepends=True) if old else []
    after = pretty(new.document).splitlines(keepends=True)
    name_old = f"policy v{old.version}" if old else "(none)"
    return "".join(difflib.unified_diff(before, after, name_old, f"policy v{new.version}"))


def previous_of(version: PolicyVersion) -> PolicyVersion | None:
    return PolicyVersion.objects.filter(version__lt=version.version).order_by("-version").first()
