"""Summaries of large outputs: the exact error lines, commands and file:line
locations are kept, plus the reference of the full artifact."""

from __future__ import annotations

import json
import re

_IMPORTANT = re.compile(
    r"(error|exception|traceback|fail|fatal|panic|assert|denied|not found|warning)"  # error lines
    r"|^\s*(\$|#|>>>|\+ )\s*\S"  # commands as echoed by shells and test runners
    r'|File "[^"]+", line \d+'  # Python locations
    r"|[\w./-]+\.[A-Za-z0-9]+:\d+",  # path/file.ext:line[:col]
    re.IGNORECASE,
)
_HEAD_LINES = 15
_TAIL_LINES = 15
_LINE_CAP = 400


def summarise(text: str, limit: int, artifact: str | None = None) -> str:
    """``text`` if it fits in ``limit`` characters; otherwise its first and last lines
    and, between them, every line that looks like an error, a command or a file:line
    location (numbered, exact up to a per-line cap), plus the artifact reference."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    ref = f"; full output: artifact {artifact}" if artifact else ""
    if len(lines) <= 2:  # one long line (e.g. a JSON value): keep its ends
        keep = max(200, limit // 2)
        return f"{text[:keep]}\n[... {len(text) - keep - keep // 2} characters omitted by the harness{ref} ...]\n{text[-(keep // 2) :]}"
    head = lines[:_HEAD_LINES]
    tail = lines[-_TAIL_LINES:] if len(lines) > _HEAD_LINES + _TAIL_LINES else []
    middle_start, middle_end = len(head), len(lines) - len(tail)
    kept: list[str] = []
    used = sum(min(len(line), _LINE_CAP) + 1 for line in head + tail)
    skipped_important = 0
    for number in range(middle_start, middle_end):
        line = lines[number]
        if not _IMPORTANT.search(line):
            continue
        shown = f"L{number + 1}: {_cap(line)}"
        if used + len(shown) + 1 > limit:
            skipped_important += 1
            continue
        kept.append(shown)
        used += len(shown) + 1
    omitted = middle_end - middle_start
    header = (
        f"[summarised by the harness: {len(text)} characters, {len(lines)} lines; showing the first {len(head)} and last "
        f"{len(tail)} lines and {len(kept)} of the {omitted} lines between them that mention errors, commands or "
        f"file locations{ref}]"
    )
    if skipped_important:
        header += f"\n[{skipped_important} more such lines did not fit]"
    body = [_cap(line) for line in head]
    body.append(f"[... {omitted} lines omitted; the matching ones follow ...]" if kept else f"[... {omitted} lines omitted ...]")
    body += kept
    if tail:
        body.append("[... last lines ...]")
        body += [_cap(line) for line in tail]
    return header + "\n" + "\n".join(body)


def _cap(line: str) -> str:
    return line if len(line) <= _LINE_CAP else line[:_LINE_CAP] + f" [... {len(line) - _LINE_CAP} more characters]"


def render_data(data: object, limit: int, artifact: str | None = None) -> str:
    """A tool's data object as text: string fields raw (so log lines stay lines), other
    fields as JSON, each summarised when the whole does not fit."""
    if not isinstance(data, dict):
        return summarise(json.dumps(data, ensure_ascii=False, sort_keys=True), limit, artifact)
    fields: list[tuple[str, str]] = []
    for key, value in data.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        fields.append((str(key), text))
    total = sum(len(k) + len(v) + 3 for k, v in fields)
    if total > limit and fields:
        share = max(500, limit // len(fields))
        fields = [(k, summarise(v, share, artifact)) for k, v in fields]
    return "\n".join(f"{k}:\n{v}" if "\n" in v else f"{k}: {v}" for k, v in fields)
