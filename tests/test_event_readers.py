"""Outside the core, events are read as their typed classes (core.events): a row's
``typed()``, a type named by ``ev.type_name(ev.Class)``. A type written as a string
(``filter(type="kill_requested")``, ``row.type == "stopped"``, a tuple of names) is a
reader a renamed or retired event leaves behind silently; named by its class it is a
type error and an import error instead. This reads the project's source for such
strings; the core defines the names (its events module) and matches on the classes."""

from __future__ import annotations

import ast
import subprocess
import typing
from pathlib import Path

import pytest

from core import events as ev

ROOT = Path(__file__).resolve().parent.parent
NAMES = frozenset(ev.type_name(kind) for kind in typing.get_args(ev.AnyEvent))
# Not the product's code: the tests and benchmarks write rows as a client would.
SKIPPED = {"tests", "bench", "scripts", "examples", "core"}


def _names(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [item.value for item in node.elts if isinstance(item, ast.Constant) and item.value in NAMES]
    return []


def _is_type(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "type"
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "type"


def spelt_out(source: str) -> list[tuple[int, list[str]]]:
    """(line, names) of each event type written as a string: a ``type``/``type__in``
    argument, a comparison with a ``type``, or a sequence of nothing but type names."""
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Call):
            names = [name for keyword in node.keywords if keyword.arg in ("type", "type__in") for name in _names(keyword.value)]
        elif isinstance(node, ast.Compare) and any(_is_type(part) for part in (node.left, *node.comparators)):
            names = [name for part in (node.left, *node.comparators) for name in _names(part)]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List | ast.Set) and node.value.elts:
            names = _names(node.value) if len(_names(node.value)) == len(node.value.elts) else []
        if names and isinstance(node, ast.stmt | ast.expr):
            found.append((node.lineno, names))
    return sorted(found)


def test_it_names_every_event_type_by_its_class_outside_the_core() -> None:
    found = []
    # The project's own files as git sees them: not what setup installs beside them
    # (the agent CLIs' node_modules hold Python 2 scripts).
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in sorted(listed):
        parts = Path(name).parts
        if parts[0] in SKIPPED or parts[0].startswith(".") or "migrations" in parts or not (ROOT / name).exists():
            continue
        found += [f"{name}:{line}: {names}" for line, names in spelt_out((ROOT / name).read_text())]
    assert found == [], "event types written as strings; name them ev.type_name(ev.Class) and read rows with .typed():\n" + "\n".join(found)


def test_it_finds_a_type_written_as_a_string() -> None:
    # The check above is only worth something if it sees each shape it looks for.
    source = """
rows = Event.objects.filter(run=run, type="kill_requested")
others = Event.objects.filter(type__in=("call_admitted", "call_started"))
if row.type == "stopped":
    pass
if message["type"] == "denied":
    pass
KINDS = ["agent_started", "agent_ended"]
OUTCOMES = ("complete", "denied")
typed = Event.objects.filter(type=ev.type_name(ev.KillRequested))
"""
    assert spelt_out(source) == [
        (2, ["kill_requested"]),
        (3, ["call_admitted", "call_started"]),
        (4, ["stopped"]),
        (6, ["denied"]),
        (8, ["agent_started", "agent_ended"]),
    ]


def test_it_names_a_payload_field_only_if_the_class_has_it() -> None:
    # A reader that must name a field outside a typed event (a lookup the database
    # runs) names it through its class: a renamed or retired field stops the import.
    assert ev.field_name(ev.ModelNote, "detail") == "detail"
    for cls, name in ((ev.ModelNote, "details"), (ev.ModelNote, "seq"), (ev.ModelNote, "type"), (ev.Stopped, "detail")):
        with pytest.raises(LookupError, match=name):
            ev.field_name(cls, name)
