"""Canonical workspace paths. The model names files relative to the workspace; only
normalised relative paths without '..' get through, and write paths must match the
contract's globs."""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable


class PathRefused(ValueError):
    pass


def canonical_path(path: str) -> str:
    if path == "":
        raise PathRefused("path is empty")
    if "\x00" in path:
        raise PathRefused("path contains a NUL byte")
    if "\\" in path:
        raise PathRefused("path contains a backslash; use '/'")
    if path.startswith("/"):
        raise PathRefused("path must be relative to the workspace")
    if any(part == ".." for part in path.split("/")):
        raise PathRefused("path must not contain '..'")
    normal = posixpath.normpath(path)
    if normal.startswith(".git/") or normal == ".git":
        raise PathRefused("the workspace's .git directory is not accessible")
    return normal


def path_allowed(path: str, globs: Iterable[str]) -> bool:
    """``*`` crosses directory separators, so ``src/*`` covers the whole tree."""
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in globs)


def patch_targets(patch: str) -> list[str]:
    """Files a unified diff touches, from its ---/+++ headers (a/ b/ prefixes dropped)."""
    targets: list[str] = []
    for line in patch.splitlines():
        if not (line.startswith("--- ") or line.startswith("+++ ")):
            continue
        name = line[4:].split("\t", 1)[0].strip()
        if name == "/dev/null":
            continue
        if name.startswith(("a/", "b/")):
            name = name[2:]
        if name not in targets:
            targets.append(name)
    return targets
