"""Issue 28: everything a page, the API or a reviewer needs lives in the database (or
an S3 bucket: tests/test_artifact_bucket.py), never on a worker's disk. Artifacts are
stored a piece at a time and once per content, runs' quotas count them, retention
deletes what no run names any more, and the outbox lets exactly one publisher of a key
win, wherever the publishers run."""

from __future__ import annotations

import hashlib
import importlib
import shutil
import threading
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from runs.models import Artifact, ArtifactChunk, Evidence, PublishedPatch, Run, RunArtifact
from runs.persistence.artifact_backends import CHUNK_BYTES, DatabaseContent
from runs.persistence.artifacts import ArtifactStorage, masked_chunks
from runs.persistence.outbox import DatabaseOutbox, published_patch
from runs.persistence.retention import delete_expired_artifacts
from runs.runtime import advance, create_run
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from tests.fixtures_sandbox import example_workspace, fixed_call
from tests.helpers import World
from tests.runs_waiting import DEMO_CONTRACT, SCRIPTED_DEMO

MB = 1 << 20
LINE = b"collected 1234 items; test_orders.py::test_total PASSED [ 42%] ................................\n"


def streamed(response: object) -> bytes:
    """A streamed download's bytes (the test client's synchronous stream)."""
    assert isinstance(response, StreamingHttpResponse) and not response.is_async
    return b"".join(cast(Iterator[bytes], response.streaming_content))


def spooled_output(tmp_path: Path, size: int, name: str = "output") -> Path:
    """``size`` bytes of check output lines in a spool file, as a check leaves it."""
    source = tmp_path / name
    block = LINE * (MB // len(LINE))
    with open(source, "wb") as handle:
        written = 0
        while written < size:
            part = block[: size - written]
            handle.write(part)
            written += len(part)
    return source


@pytest.mark.postgres
@pytest.mark.django_db
def test_it_stores_and_streams_a_100mb_output_without_holding_it(tmp_path: Path) -> None:
    source = spooled_output(tmp_path, 100 * MB)
    tracemalloc.start()
    try:
        ref = ArtifactStorage("run-1").put_file(source, "text/plain")
        _, stored_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        size = 0
        for chunk in masked_chunks(ref):
            size += len(chunk)
        _, served_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not source.exists()  # the spool file is consumed
    assert size == 100 * MB and Artifact.objects.get(ref=ref).size == 100 * MB
    assert ArtifactChunk.objects.filter(artifact_id=ref).count() == 100 * MB // CHUNK_BYTES
    assert stored_peak < 8 * MB, f"storing held {stored_peak} bytes at once"
    assert served_peak < 8 * MB, f"streaming held {served_peak} bytes at once"


@pytest.mark.postgres
@pytest.mark.django_db
def test_it_stores_one_content_once_and_counts_it_once_per_run(tmp_path: Path) -> None:
    first = ArtifactStorage("run-a").put_file(spooled_output(tmp_path, 3 * MB + 5), "text/plain")
    again = ArtifactStorage("run-a").put(spooled_output(tmp_path, 3 * MB + 5, "again").read_bytes(), "text/plain")
    other = ArtifactStorage("run-b").put_file(spooled_output(tmp_path, 3 * MB + 5, "other"), "text/plain")
    assert first == again == other
    assert Artifact.objects.count() == 1 and ArtifactChunk.objects.filter(artifact_id=first).count() == -(-(3 * MB + 5) // CHUNK_BYTES)
    assert ArtifactStorage("run-a").stored_bytes() == ArtifactStorage("run-b").stored_bytes() == 3 * MB + 5
    assert ArtifactStorage().stored_bytes() == 0  # a store given no run counts nothing
    assert ArtifactStorage().get(first) == spooled_output(tmp_path, 3 * MB + 5, "expected").read_bytes()


@pytest.mark.postgres
@pytest.mark.django_db
def test_it_stores_an_empty_output() -> None:
    ref = ArtifactStorage("run-a").put(b"", "text/plain")
    assert ArtifactStorage().get(ref) == b"" and list(masked_chunks(ref)) == []


@pytest.mark.django_db
def test_it_refuses_a_reference_that_is_no_artifacts() -> None:
    with pytest.raises(ValueError, match="not an artifact reference"):
        ArtifactStorage().get("sha256:../../etc/passwd")


# -- retention ---------------------------------------------------------------------


def ended_run(world: World, actor: User, days_ago: float) -> Run:
    run = world.create(actor=actor, script=[])
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.COMPLETE, outcome="complete", updated_at=timezone.now() - timedelta(days=days_ago)
    )
    return Run.objects.get(pk=run.pk)


@pytest.mark.postgres
@pytest.mark.django_db
def test_it_deletes_the_artifacts_of_runs_that_ended_before_the_retention_but_keeps_shared_ones(operator: User) -> None:
    world = World()
    old, newer, running = ended_run(world, operator, 40), ended_run(world, operator, 5), world.create(actor=operator, script=[])
    Run.objects.filter(pk=running.pk).update(updated_at=timezone.now() - timedelta(days=40))
    only_old = ArtifactStorage(str(old.pk)).put(b"only the old run's output\n", "text/plain")
    shared = ArtifactStorage(str(old.pk)).put(b"the same output in both runs\n", "text/plain")
    assert ArtifactStorage(str(newer.pk)).put(b"the same output in both runs\n", "text/plain") == shared
    still_running = ArtifactStorage(str(running.pk)).put(b"a run that has not ended\n", "text/plain")
    patch = ArtifactStorage(str(old.pk)).put(b"# Harness publish\n", "text/x-diff")
    assert DatabaseOutbox().publish("a" * 32, str(old.pk), patch, 18)
    Artifact.objects.update(stored_at=timezone.now() - timedelta(days=40))

    assert delete_expired_artifacts(0, timezone.now()).artifacts == 0  # 0: kept for ever
    deleted = delete_expired_artifacts(30, timezone.now())

    assert (deleted.runs, deleted.artifacts) == (1, 2)
    assert set(Artifact.objects.values_list("ref", flat=True)) == {shared, still_running}
    assert not ArtifactChunk.objects.filter(artifact_id__in=[only_old, patch]).exists()
    assert not RunArtifact.objects.filter(run_id=str(old.pk)).exists()
    assert ArtifactStorage().get(shared) == b"the same output in both runs\n"
    # The key stays taken: a second publisher still sees a duplicate, with no patch to serve.
    assert DatabaseOutbox().published("a" * 32) and published_patch("a" * 32) is None
    assert not DatabaseOutbox().publish("a" * 32, str(old.pk), patch, 18)


@pytest.mark.django_db
def test_it_keeps_an_unnamed_artifact_that_was_stored_again_since_the_cutoff() -> None:
    ref = ArtifactStorage().put(b"stored long ago and again now\n", "text/plain")
    Artifact.objects.update(stored_at=timezone.now() - timedelta(days=40))
    ArtifactStorage().put(b"stored long ago and again now\n", "text/plain")  # moves stored_at on
    assert delete_expired_artifacts(30, timezone.now()).artifacts == 0
    Artifact.objects.update(stored_at=timezone.now() - timedelta(days=40))
    assert delete_expired_artifacts(30, timezone.now()).artifacts == 1 and not Artifact.objects.filter(ref=ref).exists()


# -- the outbox --------------------------------------------------------------------


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_it_lets_exactly_one_of_many_concurrent_publishers_of_a_key_win() -> None:
    assert connection.vendor == "postgresql"
    key = "b" * 32
    publishers = 8
    ready = threading.Barrier(publishers)
    won: list[bool] = []
    failed: list[BaseException] = []

    def publish(number: int) -> None:
        try:
            ref = ArtifactStorage(f"run-{number}").put(b"# Harness publish\nthe one patch\n", "text/x-diff")
            ready.wait(30)
            won.append(DatabaseOutbox().publish(key, f"run-{number}", ref, 32))
        except BaseException as exc:
            failed.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(publishers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failed, failed
    assert sorted(won) == [False] * (publishers - 1) + [True]
    assert PublishedPatch.objects.filter(key=key).count() == 1
    assert published_patch(key) == b"# Harness publish\nthe one patch\n"


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_it_stores_one_content_written_by_concurrent_writers_once() -> None:
    assert connection.vendor == "postgresql"
    writers = 6
    ready = threading.Barrier(writers)
    refs: list[str] = []
    failed: list[BaseException] = []
    content = LINE * 30_000  # several chunks

    def write(number: int) -> None:
        try:
            ready.wait(30)
            refs.append(ArtifactStorage(f"run-{number}", DatabaseContent()).put(content, "text/plain"))
        except BaseException as exc:
            failed.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failed, failed
    assert len(set(refs)) == 1 and Artifact.objects.count() == 1
    assert ArtifactChunk.objects.count() == -(-len(content) // CHUNK_BYTES) and ArtifactStorage().get(refs[0]) == content
    assert RunArtifact.objects.filter(ref=refs[0]).count() == writers


# -- the promise ---------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_it_serves_a_finished_runs_output_and_patch_after_every_worker_directory_is_gone(
    tmp_path: Path, settings: Any, operator: User, reviewer: User, docker_engine: Any
) -> None:
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.SPOOL_DIR = tmp_path / "spool"
    run = create_run(DEMO_CONTRACT, SCRIPTED_DEMO, operator, enqueue=False)
    assert advance(str(run.pk)) == "waiting_approval"
    api = APIClient()
    api.force_login(reviewer)
    request = ApprovalRequest.objects.get(run=run, status="pending")
    assert api.post(f"/api/approvals/{request.pk}/grant/").status_code == 200
    assert advance(str(run.pk)) == "complete"
    check = Evidence.objects.get(run=run)
    [published] = PublishedPatch.objects.filter(run_id=str(run.pk))
    patch = published_patch(published.key)
    assert patch is not None and b'if line["quantity"] < 0:' in patch

    for directory in (settings.WORKSPACE_ROOT, settings.SPOOL_DIR):
        shutil.rmtree(directory, ignore_errors=True)
    assert not settings.WORKSPACE_ROOT.exists() and not settings.SPOOL_DIR.exists()

    client = Client()
    client.force_login(reviewer)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    for ref in (check.output_ref, published.ref):
        assert reverse("runs:artifact", args=[run.pk, ref]) in page
    shown = client.get(reverse("runs:artifact", args=[run.pk, check.output_ref]))
    assert shown.status_code == 200 and b"passed" in shown.content
    downloaded = client.get(reverse("runs:artifact", args=[run.pk, published.ref]) + "?download=1")
    assert streamed(downloaded) == patch
    served = api.get(f"/api/runs/{run.pk}/artifacts/{published.ref}/")
    assert served.status_code == 200 and streamed(served) == patch
    output = api.get(f"/api/runs/{run.pk}/artifacts/{check.output_ref}/")
    assert output.status_code == 200 and b"passed" in streamed(output)
    report = api.get(f"/api/runs/{run.pk}/report/").json()
    assert report["status"] == "complete"
    assert api.get(f"/api/runs/{run.pk}/artifacts/sha256:{'0' * 64}/").status_code == 404  # not this run's


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_it_publishes_a_key_once_from_workers_on_different_hosts(tmp_path: Path) -> None:
    """The publish tool itself, from executors that share nothing but the database (each
    its own copy of the workspace, as on another host): one applies, the rest see a
    duplicate, and the outbox holds the one patch."""
    assert connection.vendor == "postgresql"
    hosts = 4
    key = "c" * 32
    executors = []
    for host in range(hosts):
        workspace = example_workspace(tmp_path / f"host-{host}")
        workspace.write_file("orders/total.py", "TOTAL = 1\n")
        executors.append(
            SandboxExecutor(
                "run-on-hosts", workspace, None, ArtifactStorage("run-on-hosts"), DatabaseOutbox(), ToolSettings(write_paths=("orders/*",))
            )
        )
    call = fixed_call(executors[0], "publish", {"message": "one change"}, key)
    ready = threading.Barrier(hosts)
    receipts: list[dict[str, Any]] = []
    failed: list[BaseException] = []

    def publish(executor: SandboxExecutor) -> None:
        try:
            ready.wait(30)
            receipt = executor.execute(call)
            assert isinstance(receipt, dict)
            receipts.append(receipt)
        except BaseException as exc:
            failed.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=publish, args=(executor,)) for executor in executors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failed, failed
    assert sorted(r["effect"] for r in receipts) == ["applied"] + ["none"] * (hosts - 1)
    assert all(r["data"]["duplicate"] for r in receipts if r["effect"] == "none")
    [applied] = [r for r in receipts if r["effect"] == "applied"]
    assert published_patch(key) == ArtifactStorage().get(applied["data"]["patch_ref"])
    assert PublishedPatch.objects.filter(key=key).count() == 1


@pytest.mark.django_db
def test_it_moves_the_files_of_an_installation_from_before_into_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from django.apps import apps

    upgrade = importlib.import_module("runs.migrations.0007_artifacts_from_disk")
    output = b"3 passed\n" * 1000
    kept = "sha256:" + hashlib.sha256(output).hexdigest()
    gone = "sha256:" + "0" * 64
    root, outbox = tmp_path / "artifacts", tmp_path / "outbox"
    (root / kept[7:9]).mkdir(parents=True)
    (root / kept[7:9] / kept[7:]).write_bytes(output)
    outbox.mkdir()
    patch = b"# Harness publish " + b"a" * 32 + b"\n# run: run-1\n\n--- a/x\n+++ b/x\n"
    (outbox / ("a" * 32 + ".patch")).write_bytes(patch)
    # The rows as an installation from before 0006 has them: bytes on disk only.
    Artifact.objects.create(ref=kept, size=len(output), media_type="text/plain")
    Artifact.objects.create(ref=gone, size=5, media_type="text/plain")
    monkeypatch.setenv("HARNESS_ARTIFACT_ROOT", str(root))
    monkeypatch.setenv("HARNESS_OUTBOX_DIR", str(outbox))

    upgrade.from_disk(apps, None)

    assert ArtifactStorage().get(kept) == output
    assert not Artifact.objects.filter(ref=gone).exists()  # the next store of it writes it whole
    assert published_patch("a" * 32) == patch and PublishedPatch.objects.get(key="a" * 32).run_id == "run-1"
    upgrade.from_disk(apps, None)  # again: nothing twice
    assert ArtifactChunk.objects.filter(artifact_id=kept).count() == -(-len(output) // CHUNK_BYTES)
