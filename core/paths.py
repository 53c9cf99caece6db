"""The one path grammar for every tool. The model names files relative to the
workspace; only normalised relative paths without '..' get through, and write paths
must match the contract's globs.

The same rule holds for paths in tool arguments, in patch headers and for files
found in the tree: a path is refused if it contains a character that a line-based
reader could split on or that hides from a reader (Unicode categories Cc, Cf, Zl,
Zp; Cs, the undecodable bytes of a file name), or a name that begins or ends with
whitespace (a header reader cannot tell it from padding). Such a path can never
reach a diff header, so a diff shown to a reviewer cannot contain a forged one."""

from __future__ import annotations

import fnmatch
import posixpath
import unicodedata
from collections.abc import Iterable

REFUSED_CATEGORIES = {
    "Cc": "control character",
    "Cf": "format character",
    "Zl": "line separator",
    "Zp": "paragraph separator",
    "Cs": "byte that is not UTF-8",
}


class PathRefused(ValueError):
    pass


def shown_path(path: str) -> str:
    """The path with every refused character (and the backslash) escaped, quoted:
    safe to put in a message, a diff or a page, and unambiguous."""
    out = []
    for char in path:
        if char == "\\" or char == '"':
            out.append("\\" + char)
        elif unicodedata.category(char) in REFUSED_CATEGORIES:
            code = ord(char)
            if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte
                out.append(f"\\x{code - 0xDC00:02x}")
            elif code < 0x100:
                out.append(f"\\x{code:02x}")
            else:
                out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def refused_character(path: str) -> str | None:
    """Why ``path`` breaks the character rule, or None."""
    for char in path:
        category = unicodedata.category(char)
        if category in REFUSED_CATEGORIES:
            name = unicodedata.name(char, "") if category != "Cs" else ""
            label = f"U+{ord(char):04X}" + (f" {name}" if name else "")
            return f"contains {label} (a {REFUSED_CATEGORIES[category]})"
    for part in path.split("/"):
        if part and (part[0].isspace() or part[-1].isspace()):
            return f"has a name that begins or ends with whitespace ({shown_path(part)})"
    return None


def canonical_path(path: str) -> str:
    if path == "":
        raise PathRefused("path is empty")
    why = refused_character(path)
    if why is not None:
        raise PathRefused(f"path {shown_path(path)} {why}; control, format, line and paragraph separator characters are refused in paths")
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
