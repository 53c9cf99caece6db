"""Publish ships exactly what the reviewer saw, inside the write paths: the preview
and the outbox patch come from one function and one revision, git itself accepts
the patch for the run's source, and a change outside ``allowed_write_paths`` or a
file name that could forge a diff header is refused with the path named."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core.contract import WorkspaceSource
from core.ports import RevisionMismatch
from runs.persistence import outbox
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from sandbox.tools.publishing import PublishRefused, publication
from sandbox.workspace import patches
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.sources import WorkspaceSourceError
from tests.fixtures_sandbox import ROOT, fixed_call, make_call, shown
from tests.git_apply import git_applies_to_source, patch_applies_to_source

KEY = "0123456789abcdef0123456789abcdef"


def call(executor: SandboxExecutor, tool: str, **args: Any) -> dict[str, Any]:
    receipt = executor.execute(fixed_call(executor, tool, args, KEY) if tool == "publish" else make_call(tool, args))
    assert isinstance(receipt, dict)
    return receipt


def published_patch(executor: SandboxExecutor) -> str:
    return (outbox.published_patch(KEY) or b"").decode("utf-8", errors="surrogateescape")


def test_it_publishes_exactly_the_preview_and_git_applies_it_to_the_source(host_executor: SandboxExecutor, tmp_path: Path) -> None:
    total = (host_executor.workspace.dir / "orders" / "total.py").read_text()
    call(host_executor, "write_file", path="orders/total.py", content=total.replace("subtotal = 0", "subtotal = 0  # checked"))
    call(host_executor, "write_file", path="orders/naïve name.py", content="A = 1")  # a space, no final newline
    call(host_executor, "write_file", path="orders/deep/new.py", content="B = 2\n")
    call(
        host_executor,
        "apply_patch",
        patch='--- a/orders/__init__.py\n+++ /dev/null\n@@ -1,5 +0,0 @@\n-"""A tiny order-pricing package: the example workspace for Harness runs."""\n-\n-from orders.total import order_total\n-\n-__all__ = ["order_total"]\n',
    )
    preview = shown(host_executor, "publish", {"message": "m"}, KEY)
    assert not preview.startswith("# this publish would be refused"), preview
    receipt = call(host_executor, "publish", message="Several changes")
    assert receipt["effect"] == "applied"
    assert receipt["data"]["files"] == ["orders/__init__.py", "orders/deep/new.py", "orders/naïve name.py", "orders/total.py"]
    text = published_patch(host_executor)
    assert text.endswith("\n\n" + preview)  # the reviewer's diff, byte for byte
    assert f"# revision: {host_executor.revision()}\n" in text
    git_applies_to_source(host_executor.workspace, text.encode("utf-8", errors="surrogateescape"), tmp_path / "git")


def test_it_refuses_to_publish_changes_outside_the_write_paths_naming_them(host_executor: SandboxExecutor) -> None:
    call(host_executor, "write_file", path="orders/total.py", content="x = 1\n")
    call(host_executor, "write_file", path="orders/notes.txt", content="n\n")
    expected = "the workspace changes files outside allowed_write_paths ['orders/total.py']: \"orders/notes.txt\""
    with pytest.raises(PublishRefused) as refused:
        publication(host_executor.workspace, ["orders/total.py"])
    assert str(refused.value) == expected


def test_it_stops_rather_than_publish_a_change_made_around_the_harness(host_executor: SandboxExecutor) -> None:
    call(host_executor, "write_file", path="orders/total.py", content="x = 1\n")
    # Nothing but the harness writes the workspace; a change that came around it is
    # found by the full walk before anything is previewed or shipped.
    (host_executor.workspace.dir / "tests" / "test_total.py").write_text("def test_it():\n    pass\n")
    os.symlink("/etc/passwd", host_executor.workspace.dir / "planted")
    with pytest.raises(RevisionMismatch):
        shown(host_executor, "publish", {"message": "m"}, KEY)
    with pytest.raises(RevisionMismatch):
        host_executor.execute(fixed_call(host_executor, "publish", {"message": "m"}, KEY))
    assert outbox.published_patch(KEY) is None


def test_it_never_shows_or_publishes_a_file_name_that_could_forge_a_header(host_executor: SandboxExecutor) -> None:
    """Bypass 3: a directory named ``orders/x\\n--- a`` holding tests/test_total.py
    put a genuine-looking ``--- a/tests/test_total.py`` header into the diff."""
    forged = host_executor.workspace.dir / "orders" / "x\n--- a" / "tests"
    forged.mkdir(parents=True)
    (forged / "test_total.py").write_text("def test_it():\n    pass\n")
    with pytest.raises(RevisionMismatch):  # it came around the harness's tools
        shown(host_executor, "publish", {"message": "m"}, KEY)
    with pytest.raises(RevisionMismatch):
        host_executor.execute(fixed_call(host_executor, "publish", {"message": "m"}, KEY))
    assert outbox.published_patch(KEY) is None
    # And whatever the tree holds, the diff writer never emits such a name as a header.
    with pytest.raises(patches.PatchRefused, match="U\\+000A"):
        patches.unified_diff("orders/x\n--- a/tests/test_total.py", None, "def test_it():\n    pass\n")


@pytest.mark.django_db
def test_it_publishes_a_name_with_a_space_that_git_apply_and_patch_both_write_to_that_file(tmp_path: Path) -> None:
    """Issue 26 #6: ``tests/conftest.py z.md`` (allowed by ``*.md``) was published as
    ``+++ b/tests/conftest.py z.md``, which GNU patch applies to tests/conftest.py."""
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox
    from tests.fixtures_sandbox import example_workspace

    workspace = example_workspace(tmp_path / "run")
    executor = SandboxExecutor("names", workspace, None, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=("*.md",)))
    conftest = (workspace.pristine / "tests" / "test_total.py").read_text()
    workspace.write_file("tests/test_total.py z.md", conftest.replace("def ", "def evil_", 1))
    workspace.write_file('orders/q"uote é.md', "x\n")
    receipt = call(executor, "publish", message="m")
    assert receipt["effect"] == "applied", receipt
    text = published_patch(executor)
    assert "+++ b/tests/test_total.py z.md\t\n" in text and '+++ "b/orders/q\\"uote \\303\\251.md"\t\n' in text
    patch = text.encode("utf-8", errors="surrogateescape")
    git_applies_to_source(workspace, patch, tmp_path / "git")
    patch_applies_to_source(workspace, patch, tmp_path / "patch")
    assert (tmp_path / "patch" / "tests" / "test_total.py").read_text() == conftest
    assert [p.path for p in patches.parse_patch(text)] == ['orders/q"uote é.md', "tests/test_total.py z.md"]


@pytest.mark.parametrize("name", ["x\n--- a", "total.py\u2028.evil", "total.py\x1c", "bidi\u202egnp.py", " padded"])
def test_it_refuses_a_workspace_source_with_a_name_outside_the_grammar(tmp_path: Path, name: str) -> None:
    source = tmp_path / "source"
    (source / "orders").mkdir(parents=True)
    (source / "orders" / name).write_text("x")
    with pytest.raises(WorkspaceSourceError, match="such names are refused"):
        prepare_workspace(tmp_path / "run", WorkspaceSource(kind="path", path=str(source)), ROOT, (tmp_path,))
    archive = tmp_path / "source.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(source / "orders" / name, arcname=f"orders/{name}")
    with pytest.raises(WorkspaceSourceError, match="such names are refused"):
        prepare_workspace(tmp_path / "run2", WorkspaceSource(kind="archive", path=str(archive)), ROOT, (tmp_path,))


# Names git and the harness must agree on: spaces, quotes, non-ASCII, a leading dash.
names = st.text(alphabet=st.sampled_from(list("ab -_.é\"'#@+") + ["ü", "中"]), min_size=1, max_size=8).filter(
    lambda n: n.strip() == n and n not in (".", "..") and not n.startswith(".git")
)
contents = st.lists(st.sampled_from(["x", "", "  y", "é", "\\ No newline", "--- a/f", "+++ b/f", "@@ -1 +1 @@"]), max_size=6)


@pytest.mark.django_db
@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=names, lines=contents, final_newline=st.booleans())
def test_it_publishes_patches_git_accepts_for_any_name_and_content(
    tmp_path_factory: pytest.TempPathFactory, name: str, lines: list[str], final_newline: bool
) -> None:
    from runs.models import PublishedPatch
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox
    from tests.fixtures_sandbox import example_workspace

    tmp = tmp_path_factory.mktemp("pub")
    workspace = example_workspace(tmp / "run")
    executor = SandboxExecutor("prop", workspace, None, ArtifactStorage(), DatabaseOutbox(), ToolSettings(write_paths=("orders/*",)))
    PublishedPatch.objects.filter(key=KEY).delete()  # each example publishes into an empty outbox
    content = "\n".join(lines) + ("\n" if lines and final_newline else "")
    workspace.write_file(f"orders/{name}", content)
    workspace.write_file("orders/total.py", "changed\n")
    receipt = call(executor, "publish", message="m")
    assert receipt["effect"] == "applied", receipt
    patch = published_patch(executor).encode("utf-8", errors="surrogateescape")
    git_applies_to_source(workspace, patch, tmp / "git")
    patch_applies_to_source(workspace, patch, tmp / "patch")
