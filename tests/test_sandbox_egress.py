"""Egress for checks: off by default; a policy may let one check reach named
host:port destinations, only through the per-call proxy in the worker
(sandbox/egress/proxy.py). A check installs a package with pip from an index the test
serves on loopback; the same check is refused when the index is not on its list; a
check that tries another host, a raw address, its own DNS lookup and the metadata
address gets nowhere; every connection is an event for its call. Under runc and
runsc (gVisor)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core import events as ev
from core.contract import WorkspaceSource
from core.errors import InputError
from core.fences import RowLock
from core.policy import CheckDef, Destination, check_policy
from core.report import build_report
from sandbox.container.sandbox_container import SandboxContainer
from sandbox.egress import proxy as egress
from sandbox.egress.proxy import PIPELINED, Connection, EgressProxy, EgressRefused, do_connect, parse_head
from sandbox.executor import SandboxExecutor
from sandbox.tools.context import ToolSettings
from sandbox.workspace.preparation import prepare_workspace
from sandbox.workspace.run_workspace import RunWorkspace
from tests.busy import spinning
from tests.fixtures_runtimes import RuntimeEngine
from tests.fixtures_sandbox import (
    ROOT,
    TEST_LIMITS,
    WRITE_PATHS,
    Outcome,
    drive,
    reset_workspace,
    sandbox_contract,
    sandbox_policy,
    start_container,
    step,
)
from tests.helpers import World
from tests.package_index import MESSAGE, PIP_ZIPAPP, PackageIndex, build_pip_zipapp, pip_install, serve_index

# Tries every way out but the allowed one; prints what each attempt got and exits 0
# only when all of them failed.
PROBE = """
import http.client, json, os, socket, sys, urllib.request
port = int(sys.argv[1])
proxy_port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
got = {}
def attempt(name, fn):
    try:
        got[name] = "reached: " + repr(fn())[:200]
    except Exception as exc:
        got[name] = "failed: " + str(exc)[:300]
def tunnel(host, port):
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
    conn.set_tunnel(host, port)
    conn.request("GET", "/")
    return conn.getresponse().status
def direct(host, port):
    return socket.create_connection((host, port), timeout=5)
attempt("other_host", lambda: urllib.request.urlopen(f"http://pypi.internal:{port}/simple/", timeout=10).status)
attempt("other_host_tls", lambda: tunnel("pypi.org", 443))
attempt("raw_address", lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/simple/", timeout=10).status)
attempt("metadata", lambda: urllib.request.urlopen("http://169.254.169.254/latest/meta-data/", timeout=10).status)
attempt("metadata_direct", lambda: direct("169.254.169.254", 80))
attempt("own_dns", lambda: socket.getaddrinfo("pypi.org", 443))
attempt("index_direct", lambda: direct("localhost", port))
print(json.dumps(got))
sys.exit(0 if all(v.startswith("failed") for v in got.values()) else 1)
"""

# The relay as the image ships it (sandbox/image/harness), run here as a local process.
RELAY_SOURCE = Path(__file__).resolve().parent.parent / "sandbox" / "image" / "harness" / "relay.py"


@dataclass
class EgressSandbox:
    run_id: str
    workspace: RunWorkspace
    container: SandboxContainer
    index: PackageIndex


@pytest.fixture(scope="module")
def egress_sandbox(runtime_engine: RuntimeEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressSandbox]:
    """A workspace holding pip (as a zipapp) and the probe, its container under the
    module's runtime, and the package index on loopback."""
    base = tmp_path_factory.mktemp("egress")
    source = base / "source"
    source.mkdir()
    build_pip_zipapp(source / PIP_ZIPAPP)
    (source / "probe.py").write_text(PROBE)
    run_id = f"egress-{runtime_engine.runtime}-{uuid.uuid4().hex[:8]}"
    workspace = prepare_workspace(base / run_id, WorkspaceSource(kind="path", path=str(source)), ROOT, (ROOT, base))
    container = start_container(run_id, workspace, runtime_engine.limits(TEST_LIMITS))
    try:
        with serve_index(base / "index") as index:
            yield EgressSandbox(run_id, workspace, container, index)
    finally:
        container.remove()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Driven:
    outcome: Outcome
    told: list[ev.Event]

    def connections(self) -> list[ev.EgressConnection]:
        return [e for e in self.told if isinstance(e, ev.EgressConnection)]

    def check_call(self, check_id: str) -> str:
        calls = [str(e.call_id) for e in self.outcome.of_type("receipt_recorded") if e.receipt["data"].get("check_id") == check_id]
        assert len(calls) == 1, self.outcome.summary()
        return calls[0]


def run_checks(box: EgressSandbox, tmp_path: Path, *checks: CheckDef, egress_max_events: int = 200) -> Driven:
    """The real loop runs each check once, then finishes; what the executor told
    while the checks ran (their connections) is kept beside the loop's events."""
    from runs.persistence.artifacts import ArtifactStorage
    from runs.persistence.outbox import DatabaseOutbox

    reset_workspace(box.workspace)
    box.container.kill_processes()
    told: list[ev.Event] = []
    executor = SandboxExecutor(
        box.run_id,
        box.workspace,
        box.container,
        ArtifactStorage(),
        DatabaseOutbox(),
        ToolSettings(write_paths=WRITE_PATHS, spool_dir=tmp_path / "spool", egress_max_events=egress_max_events),
        notify=told.append,
    )
    script = [*(step("run_check", check_id=c.check_id) for c in checks), step("finish", summary="checked")]
    contract = sandbox_contract(targets=[c.check_id for c in checks])
    outcome = drive(executor, sandbox_policy(*checks), script, contract)
    return Driven(outcome, told)


def index_check(box: EgressSandbox, egress: list[Destination]) -> CheckDef:
    return CheckDef(check_id="deps", command=pip_install(box.index), timeout_seconds=180, egress=egress)


@pytest.mark.docker
@pytest.mark.slow
def test_it_installs_a_package_from_an_allowed_index_through_the_proxy(egress_sandbox: EgressSandbox, tmp_path: Path, db: None) -> None:
    box = egress_sandbox
    check = index_check(box, [Destination(host="localhost", port=box.index.port)])
    driven = run_checks(box, tmp_path, check)
    receipt = driven.outcome.receipt("run_check", "deps")
    assert receipt["data"]["exit_code"] == 0, receipt["data"]["output"]
    assert MESSAGE in receipt["data"]["output"]
    call_id = driven.check_call("deps")
    connections = driven.connections()
    # The simple page and the wheel: each its own connection, each this call's.
    assert len(connections) >= 2
    assert {(c.call_id, c.check_id, c.host, c.port, c.allowed) for c in connections} == {
        (call_id, "deps", "localhost", box.index.port, True)
    }
    assert all(c.bytes_out > 0 and c.bytes_in > 0 and c.reason == "" for c in connections)
    summary = {"host": "localhost", "port": box.index.port, "allowed": True, "connections": len(connections)}
    assert {k: receipt["data"]["egress"][0][k] for k in summary} == summary
    assert receipt["data"]["egress"][0]["bytes_in"] == sum(c.bytes_in for c in connections)
    # The evidence, and so the report and the reviewer's page, names where it went.
    report = build_report(driven.outcome.state)
    [evidence] = report["evidence"]
    assert evidence["passed"] is True
    assert [(d["host"], d["port"], d["allowed"]) for d in evidence["egress"]] == [("localhost", box.index.port, True)]


# A tunnel (what https:// and most package managers use) to the allowed index.
TUNNEL = """
import http.client, os, sys
proxy_port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
conn.set_tunnel("localhost", int(sys.argv[1]))
conn.request("GET", "/simple/tinydep/")
response = conn.getresponse()
print(response.status, response.read().decode())
"""


@pytest.mark.docker
@pytest.mark.slow
def test_it_tunnels_to_an_allowed_destination_with_connect(egress_sandbox: EgressSandbox, tmp_path: Path, db: None) -> None:
    box = egress_sandbox
    port = box.index.port
    tunnel = CheckDef(check_id="tunnel", command=["python3", "-c", TUNNEL, str(port)], egress=[Destination(host="localhost", port=port)])
    driven = run_checks(box, tmp_path, tunnel)
    receipt = driven.outcome.receipt("run_check", "tunnel")
    assert receipt["data"]["exit_code"] == 0, receipt["data"]["output"]
    assert receipt["data"]["output"].startswith("200 ") and "tinydep-1.0-py3-none-any.whl" in receipt["data"]["output"]
    [connection] = driven.connections()
    assert (connection.call_id, connection.method, connection.host, connection.port) == (
        driven.check_call("tunnel"),
        "CONNECT",
        "localhost",
        port,
    )
    assert connection.allowed and connection.bytes_out > 0 and connection.bytes_in > 0


@pytest.mark.docker
@pytest.mark.slow
def test_it_records_a_tunnels_final_counts_with_the_cpus_busy(egress_sandbox: EgressSandbox, tmp_path: Path, db: None) -> None:
    # Under load the event was once written before the request's bytes were counted
    # (bytes_out=0 for a request that fetched the wheel).
    box = egress_sandbox
    port = box.index.port
    tunnel = CheckDef(check_id="tunnel", command=["python3", "-c", TUNNEL, str(port)], egress=[Destination(host="localhost", port=port)])
    with spinning(2):
        driven = run_checks(box, tmp_path, tunnel)
    receipt = driven.outcome.receipt("run_check", "tunnel")
    assert receipt["data"]["output"].startswith("200 "), receipt["data"]["output"]
    [connection] = driven.connections()
    [summary] = receipt["data"]["egress"]
    assert connection.bytes_out > 0 and connection.bytes_in > 0
    assert (summary["bytes_out"], summary["bytes_in"]) == (connection.bytes_out, connection.bytes_in)


@pytest.mark.docker
@pytest.mark.slow
def test_it_fails_clearly_when_the_index_is_not_on_the_checks_list(egress_sandbox: EgressSandbox, tmp_path: Path, db: None) -> None:
    box = egress_sandbox
    elsewhere = Destination(host="mirror.internal", port=box.index.port)
    driven = run_checks(box, tmp_path, index_check(box, [elsewhere]))
    receipt = driven.outcome.receipt("run_check", "deps")
    assert receipt["data"]["exit_code"] != 0
    assert "No matching distribution found for tinydep" in receipt["data"]["output"], receipt["data"]["output"]
    # pip does not say why; the receipt the model reads does, and so does the evidence.
    refusal = f"localhost:{box.index.port} is not on check deps's egress list"
    assert [(d["host"], d["allowed"], d["reason"]) for d in receipt["data"]["egress"]] == [("localhost", False, refusal)]
    connections = driven.connections()
    assert connections and all(not c.allowed for c in connections)
    assert {c.call_id for c in connections} == {driven.check_call("deps")}
    assert connections[0].reason == refusal
    assert connections[0].bytes_in == 0 and connections[0].bytes_out == 0
    [evidence] = build_report(driven.outcome.state)["evidence"]
    assert evidence["passed"] is False
    assert [(d["host"], d["allowed"]) for d in evidence["egress"]] == [("localhost", False)]


@pytest.mark.docker
@pytest.mark.slow
def test_it_gives_a_check_without_egress_no_network_at_all(egress_sandbox: EgressSandbox, tmp_path: Path, db: None) -> None:
    box = egress_sandbox
    driven = run_checks(box, tmp_path, index_check(box, []))
    receipt = driven.outcome.receipt("run_check", "deps")
    assert receipt["data"]["exit_code"] != 0
    # No proxy, so no proxy address: pip goes for the index itself, on the
    # container's own loopback, where nothing listens.
    assert "No matching distribution found for tinydep" in receipt["data"]["output"], receipt["data"]["output"]
    assert "egress" not in receipt["data"]
    assert driven.connections() == []


@pytest.mark.docker
@pytest.mark.slow
def test_it_refuses_other_hosts_raw_addresses_its_own_dns_and_the_metadata_address(
    egress_sandbox: EgressSandbox, tmp_path: Path, db: None
) -> None:
    box = egress_sandbox
    port = box.index.port
    probe = CheckDef(
        check_id="probe",
        command=["python3", "probe.py", str(port)],
        timeout_seconds=120,
        egress=[Destination(host="localhost", port=port)],
    )
    driven = run_checks(box, tmp_path, probe)
    receipt = driven.outcome.receipt("run_check", "probe")
    got = json.loads(receipt["data"]["output"].strip().splitlines()[-1])
    assert receipt["data"]["exit_code"] == 0, got
    assert "403" in got["other_host"] and "403" in got["other_host_tls"], got
    assert "403" in got["raw_address"] and "403" in got["metadata"], got
    # What never reaches the proxy goes nowhere at all: no interface but loopback,
    # and the only resolver refuses.
    assert "no route to host" in got["metadata_direct"].lower() or "unreachable" in got["metadata_direct"].lower(), got
    assert "name resolution" in got["own_dns"] or "Name or service not known" in got["own_dns"], got
    # The index itself, bypassing the proxy: "localhost" in the container is its own
    # loopback, where nothing listens (refused under runc; gVisor has no ::1 either).
    assert got["index_direct"].startswith("failed: [Errno"), got
    call_id = driven.check_call("probe")
    # Its own lookup went to the container's only resolver, the relay, which refused
    # it and told the proxy: recorded like a connection refused, against the call.
    lookups = [c for c in driven.connections() if c.method == "DNS"]
    assert lookups and {c.host for c in lookups} == {"pypi.org"}, lookups
    assert all(c.call_id == call_id and not c.allowed and c.port == 53 and "DNS lookup is refused" in c.reason for c in lookups)
    seen = {(c.host, c.port, c.method): c for c in driven.connections() if c.method != "DNS"}
    assert set(seen) == {
        ("pypi.internal", port, "GET"),
        ("pypi.org", 443, "CONNECT"),
        ("127.0.0.1", port, "GET"),
        ("169.254.169.254", 80, "GET"),
    }
    assert all(c.call_id == call_id and not c.allowed and c.bytes_out == 0 for c in seen.values())
    assert seen[("pypi.internal", port, "GET")].reason == f"pypi.internal:{port} is not on check probe's egress list"
    assert seen[("127.0.0.1", port, "GET")].reason == "127.0.0.1 is a raw address; checks reach hosts by name only"
    assert "metadata" in seen[("169.254.169.254", 80, "GET")].reason


# One connection after another: three to the allowed index, two to a host not listed.
MANY = """
import urllib.request, sys
port = int(sys.argv[1])
for host in ["localhost", "localhost", "localhost", "pypi.internal", "pypi.internal"]:
    try:
        print(urllib.request.urlopen(f"http://{host}:{port}/simple/tinydep/", timeout=10).status)
    except Exception as exc:
        print("failed", exc)
"""


@pytest.mark.docker
@pytest.mark.slow
def test_it_counts_the_connections_past_the_bound_in_one_event(egress_sandbox: EgressSandbox, tmp_path: Path, db: None) -> None:
    box = egress_sandbox
    port = box.index.port
    many = CheckDef(check_id="many", command=["python3", "-c", MANY, str(port)], egress=[Destination(host="localhost", port=port)])
    driven = run_checks(box, tmp_path, many, egress_max_events=2)
    receipt = driven.outcome.receipt("run_check", "many")
    lines = receipt["data"]["output"].strip().splitlines()
    assert lines[:3] == ["200"] * 3 and all("403" in line for line in lines[3:]) and len(lines) == 5, lines
    call_id = driven.check_call("many")
    recorded = driven.connections()
    assert [(c.call_id, c.host, c.allowed) for c in recorded] == [(call_id, "localhost", True)] * 2
    [omitted] = [e for e in driven.told if isinstance(e, ev.EgressConnectionsOmitted)]
    assert (omitted.call_id, omitted.check_id, omitted.limit) == (call_id, "many", 2)
    assert (omitted.connections, omitted.allowed, omitted.refused) == (3, 1, 2)
    # Nothing is lost from the totals: the evidence's per-destination sums are the
    # recorded connections plus the counted ones.
    reached = {(d["host"], d["allowed"]): d for d in receipt["data"]["egress"]}
    assert reached[("localhost", True)]["connections"] == 3 and reached[("pypi.internal", False)]["connections"] == 2
    assert omitted.bytes_in == sum(d["bytes_in"] for d in reached.values()) - sum(c.bytes_in for c in recorded) > 0
    assert omitted.bytes_out == sum(d["bytes_out"] for d in reached.values()) - sum(c.bytes_out for c in recorded)


def test_it_refuses_a_raw_address_or_a_bad_name_as_a_policy_destination() -> None:
    document = sandbox_policy().model_dump()
    document["checks"][0]["egress"] = [{"host": "Mirror_Internal", "port": 3128}, {"host": "10.0.0.8", "port": 3128}]
    with pytest.raises(InputError) as refused:
        check_policy(document)
    assert [(p.field, p.message) for p in refused.value.problems] == [
        ("checks[0].egress[0].host", "must be a host name in lowercase letters, digits, '-' and '.' (for example pypi.internal)"),
        ("checks[0].egress[1].host", "10.0.0.8 is an address; name the host (the proxy refuses raw addresses)"),
    ]
    check = CheckDef(check_id="deps", command=["true"], egress=[Destination(host="pypi.internal", port=443)])
    assert check.allows("pypi.internal", 443)
    assert not check.allows("pypi.internal", 80) and not check.allows("pypi.internal.evil", 443)
    assert CheckDef(check_id="plain", command=["true"]).egress == []


def test_it_reads_where_a_proxy_request_goes_and_refuses_what_is_not_one() -> None:
    tunnel = parse_head(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443")
    assert (tunnel.method, tunnel.host, tunnel.port, tunnel.forward) == ("CONNECT", "pypi.org", 443, b"")
    plain = parse_head(b"GET http://Mirror.Internal:8080/simple/x/ HTTP/1.1\r\nHost: mirror.internal:8080\r\nProxy-Connection: keep-alive")
    assert (plain.host, plain.port) == ("mirror.internal", 8080)
    assert plain.forward == b"GET /simple/x/ HTTP/1.1\r\nHost: mirror.internal:8080\r\nConnection: close\r\n\r\n"
    assert parse_head(b"GET http://[::1]/ HTTP/1.1").host == "::1"
    for head, problem in [
        (b"GET /simple/ HTTP/1.1", "must name an http:// URL"),
        (b"CONNECT pypi.org HTTP/1.1", "names no port"),
        (b"CONNECT pypi.org:99999 HTTP/1.1", "no valid port"),
        (b"\x16\x03\x01 binary", "not an HTTP proxy request"),
    ]:
        with pytest.raises(EgressRefused, match=problem):
            parse_head(head)


@pytest.mark.django_db
def test_it_shows_each_connection_in_the_trace_beside_its_check(client: Client, reviewer: User) -> None:
    from runs.persistence.eventlog import append_events

    run_id = str(World().create().pk)
    now = timezone.now().timestamp()
    common = {"run_id": run_id, "seq": 0, "ts": now, "call_id": "c7", "check_id": "deps", "duration_ms": 12}
    reached = ev.EgressConnection(
        **common, host="pypi.internal", port=443, allowed=True, reason="", method="CONNECT", bytes_out=700, bytes_in=9000
    )
    refused = ev.EgressConnection(
        **common,
        host="169.254.169.254",
        port=80,
        allowed=False,
        reason="169.254.169.254 is link-local",
        method="GET",
        bytes_out=0,
        bytes_in=0,
    )
    omitted = ev.EgressConnectionsOmitted(
        **{k: v for k, v in common.items() if k != "duration_ms"},
        limit=200,
        connections=12,
        allowed=10,
        refused=2,
        bytes_out=5120,
        bytes_in=40960,
    )
    append_events(run_id, [reached, refused, omitted], fence=RowLock("a test's writer"))
    client.force_login(reviewer)
    page = client.get(f"/runs/{run_id}/").content.decode()
    assert 'data-call-id="c7"' in page
    assert "Network: pypi.internal:443" in page and "700 bytes out, 9000 bytes in" in page
    assert "Network refused: 169.254.169.254:80" in page and "169.254.169.254 is link-local" in page
    assert "Network: 12 more connections" in page and "past 200 recorded: 10 allowed, 2 refused" in page


@pytest.mark.django_db
def test_it_shows_the_reviewer_and_the_run_page_where_a_check_connected(
    client: Client, reviewer: User, operator: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from approvals.models import ApprovalRequest
    from runs.approval_flow.gate import DjangoApprovals
    from runs.services import drive_run, report_of

    world = World()
    plain = world.executor.execute
    reached = {"host": "pypi.internal", "port": 443, "allowed": True, "connections": 3, "bytes_out": 2100, "bytes_in": 48000, "reason": ""}
    refused = {"host": "github.com", "port": 443, "allowed": False, "connections": 1, "bytes_out": 0, "bytes_in": 0, "reason": "not listed"}

    def with_egress(call: Any) -> object:
        # The simulated check's receipt as the sandbox's check tool gives one with egress.
        result = plain(call)
        if call.tool == "run_check":
            result["data"]["egress"] = [reached, refused]  # type: ignore[index]
        return result

    monkeypatch.setattr(world.executor, "execute", with_egress)
    run = world.create(actor=operator)
    assert drive_run(run, world.environment(), DjangoApprovals(run)).status == "waiting_approval"
    request = ApprovalRequest.objects.get(run=run, status="pending")
    client.force_login(reviewer)
    shown = "network: pypi.internal:443 reached (3 connections, 2100 bytes out, 48000 bytes in); github.com:443 refused (not listed)"
    assert shown in client.get(reverse("approvals:detail", args=[request.pk])).content.decode()
    assert shown in client.get(f"/runs/{run.pk}/").content.decode()
    [evidence] = report_of(run)["evidence"]
    assert evidence["egress"] == [reached, refused]


@pytest.mark.django_db
def test_it_lets_the_admin_give_a_check_network_destinations_and_keeps_them(client: Client, admin_user: User) -> None:
    from approvals.policies import current_policy_row
    from tests.test_policy_admin import ADD, inline_form

    client.force_login(admin_user)
    data = inline_form(client)
    assert data["checks-0-egress"] == ""
    data.update({"checks-0-egress": "pypi.internal:443\nmirror.internal:8080", "note": "dependencies from the mirror"})
    assert client.post(ADD, data).status_code == 302
    destinations = [{"host": "pypi.internal", "port": 443}, {"host": "mirror.internal", "port": 8080}]
    assert current_policy_row().document["checks"][0]["egress"] == destinations
    # Edited again without touching them: kept.
    again = inline_form(client)
    assert again["checks-0-egress"] == "pypi.internal:443\nmirror.internal:8080"
    for line, problem in [
        ("10.0.0.8:3128", "10.0.0.8 is an address; name the host"),
        ("pypi.internal", "each line must look like host:port"),
    ]:
        response = client.post(ADD, {**again, "checks-0-egress": line, "note": "bad"})
        assert response.status_code == 200
        assert problem in response.content.decode().replace("&#x27;", "'")


@pytest.mark.parametrize("address", ["169.254.169.254", "fe80::a9fe:a9fe%eth0"])
def test_it_refuses_a_listed_name_that_resolves_to_a_link_local_address(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    # A name on the list that points at the metadata service (a poisoned resolver, a
    # rebinding name) is refused after resolution, before any connection.
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    answer = [(family, socket.SOCK_STREAM, 6, "", (address, 80))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: answer)
    with pytest.raises(EgressRefused, match="a link-local or unusable address"):
        do_connect("mirror.internal", 80)


@dataclass
class Served:
    """What a destination on loopback received on each connection, in order."""

    port: int
    received: queue.Queue[bytes]


@contextmanager
def destination(answer: bytes) -> Iterator[Served]:
    """A server on loopback that reads one request (its head, and the body its
    Content-Length names), answers ``answer``, shuts its side, and then keeps what
    else arrives until the proxy closes: everything the proxy forwarded is kept."""
    server = socket.create_server(("127.0.0.1", 0))
    received: queue.Queue[bytes] = queue.Queue()

    def serve(conn: socket.socket) -> None:
        with conn:
            got = b""
            while b"\r\n\r\n" not in got and (data := conn.recv(65536)):
                got += data
            head = got.split(b"\r\n\r\n", 1)[0].lower()
            length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]) if b"content-length:" in head else 0
            while len(got) < len(head) + 4 + length and (data := conn.recv(65536)):
                got += data
            conn.sendall(answer)
            conn.shutdown(socket.SHUT_WR)
            while data := conn.recv(65536):
                got += data
            received.put(got)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # the server was closed: the test is over
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield Served(server.getsockname()[1], received)
    finally:
        server.close()


@dataclass
class LocalProxy:
    proxy: EgressProxy
    relay: subprocess.Popen[bytes]
    events: list[tuple[type[ev.Event], dict[str, Any]]]

    def exchange(self, request: bytes) -> bytes:
        """``request`` sent through the relay as a check would; what came back, to the end."""
        assert self.proxy.port is not None
        with socket.create_connection(("127.0.0.1", self.proxy.port), timeout=30) as conn:
            conn.sendall(request)
            got = b""
            while data := conn.recv(65536):
                got += data
            return got

    def finish(self) -> list[dict[str, Any]]:
        """The relay gone (as when the check ends), the proxy closed: its connection events."""
        self.relay.kill()
        self.relay.wait()
        self.proxy.close()
        return [fields for cls, fields in self.events if cls is ev.EgressConnection]


@contextmanager
def local_proxy(check: CheckDef, recorded: threading.Event | None = None) -> Iterator[LocalProxy]:
    """The proxy with the real relay program beside it as a local process rather than
    in a container: the relay's output reaches the proxy framed as Docker's attach
    stream frames it, and the proxy's frames reach the relay's input. ``recorded`` is
    set at each event the proxy writes."""
    ours, theirs = socket.socketpair()
    relay = subprocess.Popen([sys.executable, str(RELAY_SOURCE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert relay.stdin is not None and relay.stdout is not None
    relay_in, relay_out = relay.stdin, relay.stdout

    def up() -> None:
        while data := os.read(relay_out.fileno(), 65536):
            theirs.sendall(struct.pack(">BxxxL", 1, len(data)) + data)
        theirs.shutdown(socket.SHUT_WR)

    def down() -> None:
        try:
            while data := theirs.recv(65536):
                relay_in.write(data)
                relay_in.flush()
        except OSError:
            pass  # the relay is gone: the check is over

    threads = [threading.Thread(target=up, daemon=True), threading.Thread(target=down, daemon=True)]
    for thread in threads:
        thread.start()
    events: list[tuple[type[ev.Event], dict[str, Any]]] = []

    def record(cls: type[ev.Event], fields: dict[str, Any]) -> None:
        events.append((cls, fields))
        if recorded is not None:
            recorded.set()

    proxy = EgressProxy(check, record)
    try:
        proxy.start(lambda command: ours)
        yield LocalProxy(proxy, relay, events)
    finally:
        relay.kill()
        relay.wait()
        proxy.close()
        theirs.close()
        for thread in threads:
            thread.join(30)


ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\nConnection: close\r\n\r\nfine.\n"


def allowing(port: int) -> CheckDef:
    return CheckDef(check_id="fetch", command=["true"], egress=[Destination(host="localhost", port=port)])


def test_it_counts_the_bytes_a_destination_answered_before_the_send_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    # The destination reads the tunnelled request, answers and closes while the send
    # that carried the request has not yet returned in the proxy (a slowed sender,
    # as a loaded machine schedules it): the event still counts the bytes sent.
    real_connect = egress.do_connect
    recorded = threading.Event()

    class SlowSender(socket.socket):
        def send(self, data: Any, flags: int = 0, /) -> int:
            sent = super().send(data, flags)
            recorded.wait(2.0)  # the end is written first unless it waits for this send
            return sent

        def sendall(self, data: Any, flags: int = 0, /) -> None:
            super().sendall(data, flags)
            recorded.wait(2.0)

    def slow_connect(host: str, port: int) -> socket.socket:
        plain = real_connect(host, port)
        return SlowSender(plain.family, plain.type, plain.proto, fileno=plain.detach())

    monkeypatch.setattr(egress, "do_connect", slow_connect)
    request = b"GET /simple/tinydep/ HTTP/1.1\r\nHost: localhost\r\n\r\n"
    with destination(ANSWER) as server, local_proxy(allowing(server.port), recorded) as local:
        answer = local.exchange(f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode() + request)
        assert answer.endswith(ANSWER)
        assert server.received.get(timeout=30) == request
        [event] = local.finish()
    assert [event["bytes_out"], event["bytes_in"]] == [len(request), len(ANSWER)]


def test_it_counts_every_tunnelled_byte_with_the_cpus_busy() -> None:
    request = b"GET /simple/tinydep/ HTTP/1.1\r\nHost: localhost\r\n\r\n"
    with spinning(2), destination(ANSWER) as server, local_proxy(allowing(server.port)) as local:
        for _ in range(20):
            assert local.exchange(f"CONNECT localhost:{server.port} HTTP/1.1\r\n\r\n".encode() + request).endswith(ANSWER)
        events = local.finish()
    assert [(e["allowed"], e["bytes_out"], e["bytes_in"]) for e in events] == [(True, len(request), len(ANSWER))] * 20


def test_it_sends_a_plain_request_to_the_checked_host_whatever_host_the_check_named() -> None:
    with destination(ANSWER) as server, local_proxy(allowing(server.port)) as local:
        sent = f"GET http://localhost:{server.port}/simple/ HTTP/1.1\r\nHost: admin.internal\r\nAccept: */*\r\n\r\n".encode()
        assert local.exchange(sent).endswith(ANSWER)
        got = server.received.get(timeout=30)
        [event] = local.finish()
    assert got == f"GET /simple/ HTTP/1.1\r\nHost: localhost:{server.port}\r\nAccept: */*\r\nConnection: close\r\n\r\n".encode()
    assert b"admin.internal" not in got
    assert (event["allowed"], event["reason"], event["bytes_out"]) == (True, "", len(got))


def test_it_forwards_one_plain_request_per_connection_and_nothing_past_its_body() -> None:
    with destination(ANSWER) as server, local_proxy(allowing(server.port)) as local:
        first = f"POST http://localhost:{server.port}/upload HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".encode()
        second = f"GET http://localhost:{server.port}/admin HTTP/1.1\r\nHost: admin.internal\r\n\r\n".encode()
        # The second request rides in the same write as the first's body: the first is
        # answered, the second never reaches the destination, and the event says so.
        assert local.exchange(first + second).endswith(ANSWER)
        got = server.received.get(timeout=30)
        [event] = local.finish()
    assert got == f"POST /upload HTTP/1.1\r\nHost: localhost:{server.port}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".encode()
    assert (event["allowed"], event["reason"], event["bytes_out"]) == (True, PIPELINED, len(got))


def test_it_says_a_second_request_was_cut_when_the_answer_ends_the_connection_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a busy machine the destination answered and its thread wrote the connection's
    # event before the thread that read the request got past the head it sent: the
    # event said nothing of the request behind it. Here that order is forced.
    send_out = EgressProxy._send_out

    def answered_first(self: EgressProxy, conn: Connection, upstream: socket.socket, data: bytes) -> None:
        send_out(self, conn, upstream, data)
        for _ in range(1000):
            if conn.done:
                return
            time.sleep(0.01)

    monkeypatch.setattr(EgressProxy, "_send_out", answered_first)
    with destination(ANSWER) as server, local_proxy(allowing(server.port)) as local:
        first = f"GET http://localhost:{server.port}/simple/ HTTP/1.1\r\n\r\n".encode()
        second = f"GET http://localhost:{server.port}/admin HTTP/1.1\r\nHost: admin.internal\r\n\r\n".encode()
        assert local.exchange(first + second).endswith(ANSWER)
        [event] = local.finish()
    assert (event["allowed"], event["reason"]) == (True, PIPELINED)


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "Transfer-Encoding and Content-Length together are refused"),
        (b"Transfer-Encoding: chunked\r\n", "Transfer-Encoding on a plain request is refused"),
        (b"Content-Length: 5\r\nContent-Length: 7\r\n", "a Content-Length that is not one number is refused"),
        (b"Content-Length: +5\r\n", "a Content-Length that is not one number is refused"),
        (b"X-Note: a\r\n folded: Host: admin.internal\r\n", "a folded header line (obs-fold) is refused"),
        (b"Host : admin.internal\r\n", "a malformed header line is refused"),
    ],
)
def test_it_refuses_a_plain_request_a_server_could_read_as_another(headers: bytes, problem: str) -> None:
    with destination(ANSWER) as server, local_proxy(allowing(server.port)) as local:
        answer = local.exchange(f"POST http://localhost:{server.port}/x HTTP/1.1\r\n".encode() + headers + b"\r\nhello")
        [event] = local.finish()
        assert server.received.empty()
    assert answer.startswith(b"HTTP/1.1 403 Forbidden") and problem.encode() in answer
    assert (event["allowed"], event["bytes_out"], event["bytes_in"]) == (False, 0, 0) and problem in event["reason"]
