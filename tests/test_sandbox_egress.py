"""Egress for checks: off by default; a policy may let one check reach named
host:port destinations, only through the per-call proxy in the worker
(sandbox/egress.py). A check installs a package with pip from an index the test
serves on loopback; the same check is refused when the index is not on its list; a
check that tries another host, a raw address, its own DNS lookup and the metadata
address gets nowhere; every connection is an event for its call. Under runc and
runsc (gVisor)."""

from __future__ import annotations

import json
import shutil
import socket
import uuid
from collections.abc import Iterator
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
from sandbox.container import SandboxContainer
from sandbox.egress import EgressRefused, do_connect, parse_head
from sandbox.executor import SandboxExecutor
from sandbox.preparation import prepare_workspace
from sandbox.workspace import RunWorkspace
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
    from runs.artifacts import ArtifactStorage
    from runs.outbox import DatabaseOutbox

    reset_workspace(box.workspace)
    box.container.kill_processes()
    told: list[ev.Event] = []
    executor = SandboxExecutor(
        box.run_id,
        box.workspace,
        box.container,
        ArtifactStorage(),
        DatabaseOutbox(),
        write_paths=WRITE_PATHS,
        spool_dir=tmp_path / "spool",
        notify=told.append,
        egress_max_events=egress_max_events,
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
    from runs.eventlog import append_events

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
    from runs.approval_gate import DjangoApprovals
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
