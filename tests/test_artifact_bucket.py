"""The S3-compatible backend (``HARNESS_ARTIFACT_STORE=s3``) against a real S3-protocol
server on loopback: moto's server mode, started here and stopped after. (moto is a
Python package installed with the rest of requirements-dev.txt; the npm ``s3rver`` would
need Node.js on every machine the tests run on.) The store is the one of
tests/test_artifact_storage.py, its bytes in the bucket through django-storages."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from harness_site.bucket import s3_storage
from runs.models import Artifact, ArtifactChunk, Run
from runs.persistence.artifact_backends import BucketContent, content_backend
from runs.persistence.artifacts import ArtifactStorage, masked_chunks
from runs.persistence.retention import delete_expired_artifacts
from tests.fixtures_web import free_port
from tests.helpers import World
from tests.test_artifact_storage import MB, spooled_output, streamed
from tests.test_output_bounds import output_run

ACCESS = {"aws_access_key_id": "harness-test", "aws_secret_access_key": "harness-test-secret", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a free loopback port, for this module."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.stderr.read() if server.stderr else "moto server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def bucket(s3_endpoint: str) -> Iterator[Any]:
    """A fresh bucket, and the settings that make it the artifact store."""
    name = f"harness-{uuid.uuid4().hex[:12]}"
    resource = boto3.resource("s3", endpoint_url=s3_endpoint, **ACCESS)
    created = resource.create_bucket(Bucket=name)
    from django.conf import settings

    artifacts = s3_storage(
        bucket=name,
        prefix="artifacts",
        endpoint_url=s3_endpoint,
        region=ACCESS["region_name"],
        access_key=ACCESS["aws_access_key_id"],
        secret_key=ACCESS["aws_secret_access_key"],
        addressing_style="path",
    )
    storages = {**settings.STORAGES, "artifacts": artifacts}
    with override_settings(HARNESS_ARTIFACT_STORE="s3", STORAGES=storages):
        yield created
    created.objects.all().delete()
    created.delete()


def keys(bucket: Any) -> list[str]:
    return sorted(str(item.key) for item in bucket.objects.all())


@pytest.mark.django_db
def test_it_uploads_an_output_to_the_bucket_once_and_streams_it_back(bucket: Any, tmp_path: Path) -> None:
    assert isinstance(content_backend(), BucketContent)
    source = spooled_output(tmp_path, 20 * MB)
    tracemalloc.start()
    try:
        ref = ArtifactStorage("run-a").put_file(source, "text/plain")
        _, stored_peak = tracemalloc.get_traced_memory()
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        size = sum(len(chunk) for chunk in masked_chunks(ref))
        served_peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    hexdigest = ref.removeprefix("sha256:")
    assert keys(bucket) == [f"artifacts/{hexdigest[:2]}/{hexdigest}"] and size == 20 * MB
    assert not ArtifactChunk.objects.exists()  # nothing of it in the database but its row
    assert stored_peak < 24 * MB and served_peak < 8 * MB, (stored_peak, served_peak)
    again = ArtifactStorage("run-b").put(spooled_output(tmp_path, 20 * MB, "again").read_bytes(), "text/plain")
    assert again == ref and len(keys(bucket)) == 1 and Artifact.objects.count() == 1
    assert ArtifactStorage("run-a").stored_bytes() == ArtifactStorage("run-b").stored_bytes() == 20 * MB


@pytest.mark.django_db
def test_it_serves_an_artifact_from_the_bucket_on_the_page_and_in_the_api(bucket: Any, operator: User, reviewer: User) -> None:
    ref = ArtifactStorage().put(b"collected 3 items\n3 passed in 0.02s\n", "text/plain")
    run = output_run(operator, ref)
    client = Client()
    client.force_login(reviewer)
    page = client.get(reverse("runs:artifact", args=[run.pk, ref]))
    assert page.status_code == 200 and b"3 passed in 0.02s" in page.content
    api = client.get(f"/api/runs/{run.pk}/artifacts/{ref}/")
    assert api.status_code == 200 and streamed(api) == b"collected 3 items\n3 passed in 0.02s\n"


@pytest.mark.django_db
def test_it_deletes_the_object_of_an_expired_artifact(bucket: Any, operator: User) -> None:
    world = World()
    old = world.create(actor=operator, script=[])
    Run.objects.filter(pk=old.pk).update(status=Run.Status.COMPLETE, updated_at=timezone.now() - timedelta(days=40))
    expired = ArtifactStorage(str(old.pk)).put(b"old output\n", "text/plain")
    kept = ArtifactStorage("a-running-run").put(b"newer output\n", "text/plain")
    Artifact.objects.update(stored_at=timezone.now() - timedelta(days=40))
    assert delete_expired_artifacts(30, timezone.now()).artifacts == 1
    assert keys(bucket) == [f"artifacts/{kept[7:9]}/{kept[7:]}"]
    assert list(Artifact.objects.values_list("ref", flat=True)) == [kept] and expired != kept
