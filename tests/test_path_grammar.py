"""One path grammar for every tool, and one reader of patches for the validator and
the applier. Properties over paths and patch texts drawn from an alphabet holding
every character a line reader could split on or that hides from a reader: the
validator and the applier agree on the paths a patch touches, and nothing outside
the write paths ever changes."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core.errors import InputError
from core.patchtext import PatchRefused, parse_patch, patch_targets
from core.paths import REFUSED_CATEGORIES, PathRefused, canonical_path, path_allowed
from core.tools import builtin_registry
from sandbox.workspace import fileops

WRITE_PATHS = ["orders/*"]
# Every C0 control, DEL and the C1 controls, the separators str.splitlines() splits
# on, format characters (zero-width, bidi, BOM), and spaces that strip() removes.
SPECIAL = [chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7F, 0xA0)]
SPECIAL += ["\u2028", "\u2029", "\u200b", "\u200d", "\u200e", "\u202e", "\u2066", "\ufeff", "\u00a0", "\u3000", " "]
ALPHABET = list("ab/._-") + SPECIAL
names = st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=8)
paths = st.one_of(names, names.map("orders/".__add__), st.lists(names, min_size=2, max_size=3).map("/".join))
REGISTRY = builtin_registry()


def breaks_grammar(path: str) -> bool:
    edged = any(part and (part[0].isspace() or part[-1].isspace()) for part in path.split("/"))
    return edged or any(unicodedata.category(c) in REFUSED_CATEGORIES for c in path)


@hypothesis_settings(max_examples=500, deadline=None)
@given(path=paths)
def test_it_refuses_every_path_with_a_control_separator_or_format_character(path: str) -> None:
    try:
        canonical = canonical_path(path)
    except PathRefused as exc:
        message = str(exc)
        assert not any(unicodedata.category(c) in REFUSED_CATEGORIES for c in message), message  # shown escaped
        if breaks_grammar(path):
            assert message.startswith('path "') and "are refused in paths" in message
        return
    assert not breaks_grammar(path)
    assert canonical_path(canonical) == canonical


def snapshot(root: Path) -> dict[str, bytes]:
    found = {}
    for directory, _dirs, files in os.walk(root):
        for name in files:
            full = Path(directory, name)
            found[full.relative_to(root).as_posix()] = full.read_bytes()
    return found


def changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {p for p in set(before) | set(after) if before.get(p) != after.get(p)}


def new_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ws")
    (root / "orders").mkdir()
    (root / "orders" / "total.py").write_text("a\nb\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_total.py").write_text("a\n")
    return root


def file_patch(path: str, lines: list[str], tab: bool) -> str:
    suffix = "\t2026-11-30 00:00:00" if tab else ""
    body = "".join(f"+{line}\n" for line in lines)
    return f"--- /dev/null\n+++ b/{path}{suffix}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


file_patches = st.builds(
    file_patch, paths, st.lists(st.text(alphabet=st.sampled_from(ALPHABET), max_size=5), min_size=1, max_size=3), st.booleans()
)
junk = st.text(alphabet=st.sampled_from(ALPHABET + ["-", "+", "@", "\n"]), max_size=12)
patch_texts = st.builds(lambda lead, parts: lead + "\n" + "".join(parts), junk, st.lists(file_patches, min_size=1, max_size=3))


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=patch_texts)
def test_it_reads_a_patch_one_way_for_validation_and_application(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    spec = REGISTRY.get("apply_patch")
    assert spec is not None
    try:
        REGISTRY.validate(spec, {"patch": text}, WRITE_PATHS)
    except InputError:
        # Refused by the grammar (the applier's own parse refuses it too), or by
        # the write paths: either way nothing is applied.
        try:
            targets = patch_targets(text)
        except PatchRefused:
            return
        assert not all(path_allowed(t, WRITE_PATHS) for t in targets)
        return
    validated = patch_targets(text)
    assert [p.path for p in parse_patch(text)] == validated  # the applier's reading
    root = new_workspace(tmp_path_factory)
    before = snapshot(root)
    try:
        fileops.apply_planned(root, fileops.plan_patch(root, text))
    except (PatchRefused, fileops.FileRefused):
        assert snapshot(root) == before  # all or nothing
        return
    touched = changed(before, snapshot(root))
    assert touched == set(validated)
    assert all(path_allowed(p, WRITE_PATHS) for p in touched)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=paths)
def test_it_writes_exactly_the_validated_path_or_nothing(tmp_path_factory: pytest.TempPathFactory, path: str) -> None:
    spec = REGISTRY.get("write_file")
    assert spec is not None
    try:
        clean = REGISTRY.validate(spec, {"path": path, "content": "x"}, WRITE_PATHS)
    except InputError as exc:
        assert exc.problems[0].field == "args.path"
        return
    root = new_workspace(tmp_path_factory)
    before = snapshot(root)
    try:
        fileops.write_file(root, str(clean["path"]), "x")
    except fileops.FileRefused:
        assert snapshot(root) == before
        return
    assert changed(before, snapshot(root)) == {clean["path"]}
    assert path_allowed(str(clean["path"]), WRITE_PATHS)
