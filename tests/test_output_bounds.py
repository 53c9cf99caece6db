"""No output can wedge a worker or the web server (issue 26, finding 3): a check's
stored output is capped and says where it was cut, a run's artifacts have a quota,
and artifacts are masked and served a line at a time, never read whole."""

from __future__ import annotations

import re
import tracemalloc
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import cast

import docker
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.http import StreamingHttpResponse
from django.test import AsyncClient, Client, override_settings
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.redact import MASK, redact_lines
from core import events as ev
from core.fences import RowLock
from core.policy import CheckDef
from runs.models import Receipt, Run
from runs.persistence import artifacts
from runs.persistence.artifacts import ArtifactStorage, line_secrets, masked_blocks
from runs.persistence.eventlog import append_events
from runs.persistence.outbox import DatabaseOutbox
from sandbox.container.output import OutputCapture
from sandbox.container.quota import MB, DiskQuota
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from tests.fixtures_sandbox import WRITE_PATHS, drive, example_workspace, sandbox_policy, start_container, step
from tests.fixtures_web import AsgiServer, waiting_scene

GIB = 1 << 30
SECRET = "hunter2-very-secret-value"
KEY = "sk-ant-" + "A1b2C3d4E5f6G7h8I9j0" * 2


def output_run(starter: User, ref: str, **data: object) -> Run:
    """A waiting run with a check's receipt (event and row) naming ``ref`` as its output."""
    scene = waiting_scene(starter)
    run = scene.run
    receipt: dict[str, object] = {"call_id": "c9", "tool": "run_check", "status": "ok", "effect": "none", "revision": run.revision}
    receipt |= {"data": {"output_ref": ref, **data}, "artifacts": [ref]}
    event = ev.ReceiptRecorded(
        run_id=str(run.pk),
        seq=0,
        ts=timezone.now().timestamp(),
        call_id="c9",
        tool="run_check",
        attempt=1,
        valid=True,
        receipt=receipt,
        harness_revision=run.revision,
    )
    append_events(str(run.pk), [event], fence=RowLock("a test's writer"))
    run.refresh_from_db()
    Receipt.objects.create(
        run=run, call_id="c9", attempt=1, valid=True, body=receipt, harness_revision=run.revision, event_seq=run.last_seq
    )
    return run


def big_artifact(tmp_path: Path, size: int) -> str:
    """``size`` bytes of output lines, a configured secret and a credential shape in
    every thousandth, stored as a check's output is (``put_file``)."""
    line = b"collected 1234 items; test_orders.py::test_total PASSED [ 42%] ................................\n"
    special = f"env: token={SECRET} key={KEY}\n".encode()
    block = (line * 999 + special) * 8
    source = tmp_path / "output"
    with open(source, "wb") as handle:
        written = 0
        while written < size:
            part = block[: size - written]
            handle.write(part)
            written += len(part)
    return ArtifactStorage().put_file(source, "text/plain")


# -- the capture: a cap that says where it cut ---------------------------------------


def test_it_stores_no_more_than_the_limit_and_says_where_it_cut(tmp_path: Path) -> None:
    capture = OutputCapture(inline_limit=4000, spool_dir=tmp_path, store_limit=10_000)
    for number in range(100_000):
        capture.write(b"line %d\n" % number)
    capture.close()
    stored = capture.path.read_bytes()
    assert capture.cut and capture.total == sum(len(b"line %d\n" % n) for n in range(100_000))
    assert len(stored) <= 10_000 and capture.spooled < 10_000
    assert stored.startswith(b"line 0\nline 1\n") and stored.endswith(b"line 99998\nline 99999\n")
    assert f"[harness: output cut: the first {capture.spooled} of {capture.total} bytes".encode() in stored
    assert "stored output (cut)" in capture.excerpt("sha256:x")
    capture.discard()


def test_it_keeps_an_output_under_the_limit_whole(tmp_path: Path) -> None:
    capture = OutputCapture(inline_limit=4000, spool_dir=tmp_path, store_limit=10_000)
    capture.write(b"x" * 10_000)
    capture.close()
    assert not capture.cut and capture.path.read_bytes() == b"x" * 10_000
    capture.discard()


# -- on the real engine ------------------------------------------------------------

GIGABYTE = CheckDef(
    check_id="gigabyte", command=["sh", "-c", "yes 0123456789abcdef | head -c 1073741824; echo last-line"], timeout_seconds=300
)


@pytest.fixture
def runc_sandbox(docker_engine: docker.DockerClient, tmp_path: Path, db: None) -> Iterator[Callable[[DiskQuota], SandboxExecutor]]:
    """Executors on one runc container, each counting its own run's artifacts under
    the quota given. (The cap is the executor's code, the same under both runtimes;
    a gigabyte through gVisor's ptrace platform would take minutes.)"""
    workspace = example_workspace(tmp_path / "run")
    container = start_container(f"output-{uuid.uuid4().hex[:8]}", workspace)

    def executor(quota: DiskQuota) -> SandboxExecutor:
        run_id = f"output-{uuid.uuid4().hex[:8]}"
        return SandboxExecutor(
            run_id,
            workspace,
            container,
            ArtifactStorage(run_id),
            DatabaseOutbox(),
            ToolSettings(write_paths=WRITE_PATHS, spool_dir=tmp_path / "spool", quota=quota),
        )

    yield executor
    container.remove()


@pytest.mark.docker
@pytest.mark.slow
def test_it_stores_a_bounded_artifact_of_a_check_that_prints_a_gigabyte(runc_sandbox: Callable[[DiskQuota], SandboxExecutor]) -> None:
    outcome = drive(
        runc_sandbox(DiskQuota()), sandbox_policy(GIGABYTE), [step("run_check", check_id="gigabyte"), step("finish", summary="done")]
    )
    data = outcome.receipt("run_check", "gigabyte")["data"]
    assert data["exit_code"] == 0 and data["output_bytes"] == GIB + len("last-line\n")
    assert data["output_cut"] is True and data["output_stored_bytes"] < 8 * MB
    stored = ArtifactStorage().get(data["output_ref"])
    assert len(stored) <= 8 * MB
    assert stored[:17] == b"0123456789abcdef\n"
    assert b"[harness: output cut: the first" in stored[-30_000:] and stored[-2000:].endswith(b"0123456789abclast-line\n")
    assert "stored output (cut)" in data["output"] and data["output"].endswith("0123456789abclast-line\n")
    # A loud check still passes: its output is capped, not its verdict.
    assert outcome.of_type("evidence_recorded")[0].passed is True


LOUD = CheckDef(
    check_id="loud",
    command=["python3", "-c", "import os, sys; sys.stdout.write(os.urandom(1_500_000).hex())"],
    timeout_seconds=60,
)


@pytest.mark.docker
def test_it_runs_no_more_checks_once_the_runs_artifacts_reach_their_quota(runc_sandbox: Callable[[DiskQuota], SandboxExecutor]) -> None:
    executor = runc_sandbox(DiskQuota(output_max_bytes=1 * MB, run_artifacts_max_bytes=5 * MB // 2))
    outcome = drive(executor, sandbox_policy(LOUD), [step("run_check", check_id="loud")] * 4 + [step("finish", summary="done")])
    first, second, third, fourth = (r["data"] for r in outcome.receipts("run_check"))
    assert [d["output_cut"] for d in (first, second, third)] == [True, True, True]
    assert first["output_bytes"] == 3_000_000 and len(ArtifactStorage().get(first["output_ref"])) <= MB
    assert len(ArtifactStorage().get(third["output_ref"])) <= MB // 2  # what was left of the quota
    assert "quota is 2 MB (HARNESS_RUN_ARTIFACTS_MAX_MB)" in fourth["error"] and fourth["artifact_quota"] is True
    assert "output_ref" not in fourth
    assert ArtifactStorage(executor.run_id).stored_bytes() <= 5 * MB // 2


# -- masking a stream ----------------------------------------------------------------


def blocks_of(content: bytes, size: int) -> Iterator[bytes]:
    """``content`` as a backend hands it over: blocks of ``size`` bytes."""
    return (content[start : start + size] for start in range(0, len(content), size))


PIECES = st.sampled_from(
    ["a", "b c", "\n", "\r\n", " ", "é", "\udcff", SECRET, KEY, "sk-", "AKIA" + "Q" * 16, "-----BEGIN RSA PRIVATE KEY-----", "xyz" * 7]
)


@override_settings(HARNESS_SECRET_VALUES=[SECRET, "two-line-secret\nsecond-line-of-it"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(pieces=st.lists(PIECES, max_size=80), read=st.integers(1, 40))
def test_it_masks_a_stream_exactly_as_its_lines_masked_one_by_one(
    pieces: list[str], read: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny pieces and lines, so that reads, line ends and overlong-line cuts fall
    # everywhere, secrets across them included.
    monkeypatch.setattr(artifacts, "READ_BYTES", read)
    monkeypatch.setattr(artifacts, "MASK_LINE_BYTES", 64)
    monkeypatch.setattr(artifacts, "SEAM_BYTES", 128)
    monkeypatch.setattr(artifacts, "SEAM_STEP", 8)
    content = "".join(pieces).encode("utf-8", "surrogateescape")
    text = content.decode("utf-8", "surrogateescape")
    streamed = b"".join(masked_blocks(blocks_of(content, read)))
    if all(len(line.encode("utf-8", "surrogateescape")) < 64 for line in text.split("\n")):
        # No line cut: exactly what masking the whole text line by line gives, a
        # private key followed from one line to the next.
        expected = "\n".join(redact_lines(text.split("\n"), line_secrets())).encode("utf-8", "surrogateescape")
        assert streamed == expected
    # (A token shape right after a letter or digit is part of a word, common.redact:
    # KEY glued to another piece stays, so only the configured value is sure to go.)
    assert SECRET.encode() not in streamed


@override_settings(HARNESS_SECRET_VALUES=[SECRET])
def test_it_cuts_an_overlong_line_of_secrets_back_to_back_between_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the property above found: every cut point a step tried fell inside a
    # secret, and the cut went through one, leaving it readable.
    monkeypatch.setattr(artifacts, "MASK_LINE_BYTES", 64)
    monkeypatch.setattr(artifacts, "SEAM_BYTES", 128)
    monkeypatch.setattr(artifacts, "SEAM_STEP", 8)
    line = f"{SECRET}sk-{SECRET}{SECRET} xyzxyz sk- AKIA{'Q' * 16}a" * 4
    streamed = b"".join(masked_blocks([line.encode()]))
    assert SECRET.encode() not in streamed and streamed.count(MASK.encode()) >= 12


@override_settings(HARNESS_SECRET_VALUES=[])
def test_it_masks_every_line_of_a_private_key_that_spans_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "READ_BYTES", 100)
    body = ["MIIEowIBAAKCAQEA7pem" + "Qk1vZGVsTGluZQ" * 4 + str(n) for n in range(20)]
    key = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----\n"
    content = ("check output\n" * 30 + key + "done\n").encode()
    streamed = b"".join(masked_blocks(blocks_of(content, 100))).decode()
    assert not any(line in streamed for line in body)
    assert streamed.count(MASK) == len(body) and streamed.endswith("-----END RSA PRIVATE KEY-----\ndone\n")


@override_settings(
    HARNESS_SECRET_VALUES=["-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n-----END KEY-----"]
)
def test_it_masks_a_secret_of_several_lines_line_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    content = b"key:\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\nend\n"
    assert b"".join(masked_blocks([content])) == f"key:\n{MASK}\nend\n".encode()


# -- serving -------------------------------------------------------------------------


@override_settings(HARNESS_SECRET_VALUES=[SECRET])
@pytest.mark.django_db
def test_it_streams_a_download_and_never_holds_it_in_memory(operator: User, reviewer: User, tmp_path: Path) -> None:
    ref = big_artifact(tmp_path, 64 * MB)
    run = output_run(operator, ref)
    client = Client()
    client.force_login(reviewer)
    # What the first request imports (views, templates, the database driver's adapters)
    # is no part of a download's memory: the output page is served once before.
    assert client.get(reverse("runs:artifact", args=[run.pk, ref])).status_code == 200
    tracemalloc.start()
    try:
        response = client.get(reverse("runs:artifact", args=[run.pk, ref]) + "?download=1")
        assert response.streaming and response["Content-Disposition"].startswith("attachment")
        assert isinstance(response, StreamingHttpResponse)  # what ``streaming`` says, for the type checker
        size = largest = 0
        masked = leaked = False
        for chunk in cast(Iterator[bytes], response.streaming_content):  # under WSGI: a synchronous iterator
            size += len(chunk)
            largest = max(largest, len(chunk))
            masked |= MASK.encode() in chunk
            leaked |= SECRET.encode() in chunk or KEY.encode() in chunk
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert masked and not leaked
    assert size >= 64 * MB - 64 * 1024 and largest <= artifacts.MASK_LINE_BYTES + artifacts.READ_BYTES
    assert peak < 8 * MB, f"the download held {peak} bytes at once"


@override_settings(HARNESS_SECRET_VALUES=[SECRET])
@pytest.mark.django_db(transaction=True)
def test_it_streams_a_download_asynchronously_under_asgi(operator: User, reviewer: User, tmp_path: Path) -> None:
    ref = big_artifact(tmp_path, 4 * MB)
    run = output_run(operator, ref)
    client = AsyncClient()
    client.force_login(reviewer)

    async def download() -> tuple[bool, list[bytes]]:
        response = await client.get(reverse("runs:artifact", args=[run.pk, ref]) + "?download=1")
        # Django reads a synchronous iterator whole before an ASGI server sends a byte.
        assert response.streaming
        assert isinstance(response, StreamingHttpResponse)  # what ``streaming`` says, for the type checker
        return response.is_async, [chunk async for chunk in cast(AsyncIterator[bytes], response.streaming_content)]

    is_async, chunks = async_to_sync(download)()
    assert is_async
    assert len(chunks) > 4 and max(map(len, chunks)) <= artifacts.MASK_LINE_BYTES + artifacts.READ_BYTES
    body = b"".join(chunks)
    assert SECRET.encode() not in body and MASK.encode() in body


@override_settings(HARNESS_SECRET_VALUES=[SECRET])
@pytest.mark.django_db
def test_it_shows_the_start_of_a_large_output_and_that_a_check_was_cut(
    operator: User, reviewer: User, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = big_artifact(tmp_path, 32 * MB)
    run = output_run(operator, ref, output_cut=True, output_stored_bytes=32 * MB - 100, output_bytes=GIB)
    read = []
    original = artifacts.masked_chunks

    def counted(ref: str) -> Iterator[bytes]:
        for chunk in original(ref):
            read.append(len(chunk))
            yield chunk

    monkeypatch.setattr("pages.run_detail.masked_chunks", counted)
    client = Client()
    client.force_login(reviewer)
    page = client.get(reverse("runs:artifact", args=[run.pk, ref])).content.decode()
    notices = re.findall(r'<p class="flag tone-warn"[^>]*>([^<]*)</p>', page)
    assert notices == [
        f"The check printed {GIB} bytes; only {32 * MB - 100} of them were stored: the start, then a notice of the cut and the last bytes.",
        "Showing the first 2 MB; download for the rest.",
    ]
    assert page.count(SECRET) == 0 and page.count(MASK) > 0
    assert sum(read) <= 2_000_000 + 2 * artifacts.READ_BYTES  # the page never reads the rest


@pytest.mark.slow
def test_it_serves_a_300mb_artifact_from_daphne_in_bounded_memory(
    operator: User, reviewer: User, live_server_asgi: AsgiServer, tmp_path: Path
) -> None:
    """The probe: opening a 300 MB artifact took the web process from 143 MB to 1 GB."""
    ref = big_artifact(tmp_path, 300 * MB)
    run = output_run(operator, ref)
    client = Client()
    client.force_login(reviewer)
    request = urllib.request.Request(
        f"{live_server_asgi.url}/runs/{run.pk}/artifacts/{ref}/?download=1",
        headers={"Cookie": f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"},
    )
    assert live_server_asgi.proc is not None
    before = rss(live_server_asgi.proc.pid)
    peak = before
    size = 0
    with urllib.request.urlopen(request, timeout=120) as response:
        while block := response.read(1 << 20):
            size += len(block)
            if size % (16 * MB) < (1 << 20):
                peak = max(peak, rss(live_server_asgi.proc.pid))
    assert size >= 300 * MB - MB
    assert peak - before < 100 * MB, f"daphne grew from {before // MB} MB to {peak // MB} MB serving 300 MB"


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_it_ships_a_seccomp_profile_that_denies_io_uring_and_allows_clone_only_without_namespaces() -> None:
    import json

    from sandbox.container.seccomp import DENIED, NOT_IMPLEMENTED, PROFILE_PATH, build_profile

    profile = json.loads(PROFILE_PATH.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = {name for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" and "args" not in rule for name in rule["names"]}
    assert not allowed & set(DENIED) and {"read", "execve", "wait4", "futex", "openat"} <= allowed
    (clone,) = [rule for rule in profile["syscalls"] if rule["names"] == ["clone"]]
    assert clone["args"] == [{"index": 0, "value": 0x7E020000, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]
    (enosys,) = [rule for rule in profile["syscalls"] if rule.get("errnoRet") == 38]
    assert set(enosys["names"]) == set(NOT_IMPLEMENTED) and "io_uring_setup" in enosys["names"]
    # What the module builds from the same table of calls is what is shipped.
    assert build_profile(allowed | {"clone", "personality"}) == profile
