"""An outside agent's container (sandbox/agent, issue 41): the agent image as built
(sandbox/agent/image/build.sh), a small Node script as the agent. It reaches the run's
gateway (a stand-in HTTP server on the worker's loopback answering per path) through
the relay's forward port and nothing else: not another server on another port, not
the Docker socket, not a name, not another run's or the web app's other paths, not
the database's or Redis' ports; every refusal the proxy sees is an event. Its
environment holds what the caller gave and nothing more, the workspace is read-only,
a kill ends it within two seconds and a deadline stops it."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.errors import NotFound

from core import events as ev
from sandbox.agent.container import AGENT_SPEC, GATEWAY_PORT, HOME_DIR, AgentContainer, AgentResult, Gateway, home_archive
from sandbox.container.orphans import containers_by_run
from sandbox.egress.proxy import EgressRefused, Forward, forward_head
from tests.fixtures_runtimes import RuntimeEngine
from tests.fixtures_sandbox import SCOPE

TOKEN = "hrn-agent-token-for-this-run-only"


class Server:
    """An HTTP server on the worker's loopback answering every path with its own name
    and the path, and keeping the paths it was asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                owner.paths.append(self.path)
                owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                text = json.dumps({"server": owner.name, "path": self.path, "got": len(body)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            do_GET = do_POST = _answer

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @contextmanager
    def serving(self) -> Iterator[Server]:
        self.thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()


@dataclass
class Agent:
    run_id: str
    box: AgentContainer
    gateway: Server
    elsewhere: Server
    events: list[tuple[type[ev.Event], dict[str, Any]]]
    workspace: Path

    def env(self, **more: str) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": HOME_DIR,
            "HARNESS_TOKEN": TOKEN,
            "HARNESS_GATEWAY": self.box.gateway.local_url,
            "ELSEWHERE_PORT": str(self.elsewhere.port),
            **more,
        }

    def node(self, script: str, *args: str, timeout: float = 60, **env: str) -> tuple[AgentResult, str, str]:
        out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        result = self.box.run(
            ["node", "-e", script, *args],
            self.env(**env),
            on_output=lambda stream, data: out[stream].extend(data),
            timeout_seconds=timeout,
        )
        return result, out["stdout"].decode(errors="replace"), out["stderr"].decode(errors="replace")

    def connections(self) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.events if kind is ev.EgressConnection]


@contextmanager
def agent_container(image: str, tmp_path: Path, runtime: str = "runc") -> Iterator[Agent]:
    run_id = f"agent-{runtime}-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("the run's workspace\n")
    workspace.chmod(0o755)
    events: list[tuple[type[ev.Event], dict[str, Any]]] = []
    lock = threading.Lock()

    def record(kind: type[ev.Event], payload: dict[str, Any]) -> None:
        with lock:
            events.append((kind, payload))

    with Server("gateway").serving() as gateway, Server("elsewhere").serving() as elsewhere:
        spec = replace(AGENT_SPEC, image=image, runtime=runtime, memory="512m")
        box = AgentContainer.start(
            run_id, workspace, Gateway.for_run(f"http://127.0.0.1:{gateway.port}", run_id), record, spec=spec, scope=SCOPE
        )
        try:
            yield Agent(run_id, box, gateway, elsewhere, events, workspace)
        finally:
            box.close()


@pytest.fixture
def agent(agent_image: str, tmp_path: Path) -> Iterator[Agent]:
    with agent_container(agent_image, tmp_path) as made:
        yield made


# Tries each way: prints {attempt: "reached: ..." | "failed: ..."} as JSON.
ATTEMPTS = r"""
const net = require("net"), dns = require("dns").promises, fs = require("fs");
const got = {};
const gateway = process.env.HARNESS_GATEWAY;
function why(e) { return (e && e.cause && (e.cause.code || e.cause.message)) || (e && (e.code || e.message)) || String(e); }
async function attempt(name, fn) {
  try { got[name] = "reached: " + String(await fn()).slice(0, 300); } catch (e) { got[name] = "failed: " + why(e); }
}
async function get(url, init) {
  const r = await fetch(url, { ...(init || {}), signal: AbortSignal.timeout(10000) });
  const text = await r.text();
  if (r.status !== 200) throw new Error(r.status + " " + text.trim());
  return text;
}
function raw(host, port, text) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port, timeout: 5000 });
    let answer = "";
    s.on("connect", () => { if (text !== undefined) s.write(text); else { s.destroy(); resolve("connected"); } });
    s.on("data", (d) => { answer += d; });
    s.on("end", () => (answer.startsWith("HTTP/1.1 200") ? resolve(answer) : reject(new Error(answer.split("\r\n")[0] || "closed"))));
    s.on("timeout", () => { s.destroy(); reject(new Error("timeout")); });
    s.on("error", reject);
  });
}
function unix(path) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ path });
    s.on("connect", () => { s.destroy(); resolve("connected"); });
    s.on("error", reject);
  });
}
// Every port listening on the container's loopback but the gateway's (the relay's proxy port).
function listening() {
  const ports = [];
  for (const line of fs.readFileSync("/proc/net/tcp", "utf8").split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[3] === "0A") ports.push(parseInt(f[1].split(":")[1], 16));
  }
  return ports.filter((p) => p !== GATEWAY_PORT);
}
"""


def script(body: str) -> str:
    return f"const GATEWAY_PORT = {GATEWAY_PORT};\n{ATTEMPTS}\n(async () => {{\n{body}\nconsole.log(JSON.stringify(got));\n}})();\n"


def outcome(stdout: str) -> dict[str, str]:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, stdout
    found: dict[str, str] = json.loads(lines[-1])
    return found


REACH = script(
    """
await attempt("gateway_mcp", () => get(gateway + "/mcp/", { method: "POST", body: JSON.stringify({ jsonrpc: "2.0" }),
  headers: { "content-type": "application/json", authorization: "Bearer " + process.env.HARNESS_TOKEN } }));
await attempt("gateway_model", () => get(gateway + "/anthropic/v1/messages", { method: "POST", body: "{}" }));
await attempt("elsewhere_direct", () => raw("127.0.0.1", Number(process.env.ELSEWHERE_PORT), "GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"));
await attempt("elsewhere_host", () => raw("172.17.0.1", Number(process.env.ELSEWHERE_PORT)));
await attempt("docker_socket", () => unix("/var/run/docker.sock"));
await attempt("docker_socket_run", () => unix("/run/docker.sock"));
await attempt("write_workspace", () => { fs.writeFileSync("/workspace/README.md", "changed"); return "written"; });
await attempt("write_root", () => { fs.writeFileSync("/usr/local/bin/x", "x"); return "written"; });
await attempt("read_workspace", () => fs.readFileSync("/workspace/README.md", "utf8"));
await attempt("write_home", () => { fs.writeFileSync(process.env.HOME + "/notes", "mine"); return fs.readFileSync(process.env.HOME + "/notes", "utf8"); });
got.env = Object.keys(process.env).sort().join(",");
got.hostname = process.env.HOSTNAME;
got.uid = String(process.getuid());
"""
)


@pytest.mark.docker
def test_it_reaches_the_gateway_and_nothing_else(agent: Agent) -> None:
    result, stdout, stderr = agent.node(REACH)
    assert result.exit_code == 0, stderr
    got = outcome(stdout)
    assert got["gateway_mcp"].startswith("reached: "), got
    assert json.loads(got["gateway_mcp"].removeprefix("reached: ")) == {
        "server": "gateway",
        "path": f"/agent/runs/{agent.run_id}/mcp/",
        "got": 17,
    }
    assert got["gateway_model"].startswith("reached: "), got
    # The stand-in saw the run's paths with the token, its own Host, one request a connection.
    assert agent.gateway.paths == [f"/agent/runs/{agent.run_id}/mcp/", f"/agent/runs/{agent.run_id}/anthropic/v1/messages"]
    assert agent.gateway.headers[0]["authorization"] == f"Bearer {TOKEN}"
    assert agent.gateway.headers[0]["host"] == f"127.0.0.1:{agent.gateway.port}"
    assert all(h["connection"] == "close" for h in agent.gateway.headers)
    # Another port of the worker's loopback is the container's own loopback there, and
    # the host's bridge address is no route at all.
    assert got["elsewhere_direct"] == "failed: ECONNREFUSED", got
    assert got["elsewhere_host"] == "failed: ENETUNREACH", got
    assert agent.elsewhere.paths == []
    assert got["docker_socket"] == "failed: ENOENT" and got["docker_socket_run"] == "failed: ENOENT", got
    assert got["write_workspace"] == "failed: EROFS", got
    assert got["write_root"] == "failed: EROFS", got
    assert got["read_workspace"] == "reached: the run's workspace\n"
    assert got["write_home"] == "reached: mine"
    # The environment is exactly the caller's (and the engine's HOSTNAME, "agent"): the
    # token and nothing of the worker's.
    assert got["env"] == ",".join(sorted([*agent.env(), "HOSTNAME"]))
    assert got["uid"] == "1000" and got["hostname"] == "agent"
    allowed = [c for c in agent.connections() if c["allowed"]]
    assert [(c["check_id"], c["host"], c["port"], c["method"]) for c in allowed] == [
        ("agent", "127.0.0.1", agent.gateway.port, "POST"),
        ("agent", "127.0.0.1", agent.gateway.port, "POST"),
    ]
    assert all(c["bytes_out"] > 0 and c["bytes_in"] > 0 for c in allowed)


@pytest.mark.docker
def test_it_creates_the_container_hardened_and_labelled(agent: Agent, docker_engine: docker.DockerClient) -> None:
    attrs = docker_engine.api.inspect_container(agent.box.id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert any(o.startswith("seccomp=") for o in host["SecurityOpt"])
    assert host["PidsLimit"] == AGENT_SPEC.pids_limit and host["Memory"] == 512 * 1024 * 1024
    assert host["Dns"] == ["127.0.0.1"]
    assert sorted(host["Tmpfs"]) == ["/home/agent", "/tmp"]
    assert "uid=1000" in host["Tmpfs"]["/home/agent"] and "noexec" in host["Tmpfs"]["/home/agent"]
    mounts = [(m["Destination"], m["RW"]) for m in attrs["Mounts"]]
    assert mounts == [("/workspace", False)]
    assert attrs["Config"]["User"] == "65534:65534"
    # No credential in the container's own environment: the image's PATH alone.
    assert attrs["Config"]["Env"] == ["PATH=/usr/local/bin:/usr/bin:/bin"]
    # The sweep finds it by the run and the installation's scope, and close removes it.
    assert containers_by_run(scope=SCOPE, run_id=agent.run_id) == {agent.run_id: [agent.box.id]}
    agent.box.close()
    assert containers_by_run(scope=SCOPE, run_id=agent.run_id) == {}


HOSTILE = script(
    """
const me = gateway.slice(gateway.indexOf("/agent/runs/")) + "/";
const other = "/agent/runs/another-run/";
// A provider's real address, by name: nothing resolves in the container.
await attempt("provider_dns", () => dns.lookup("api.anthropic.com"));
await attempt("provider_fetch", () => get("https://api.anthropic.com/v1/messages", { method: "POST", body: "{}" }));
// Another run's endpoint, through the gateway's own forward, plainly and disguised.
await attempt("other_run", () => get("http://127.0.0.1:" + GATEWAY_PORT + other + "mcp/", { method: "POST", body: "{}" }));
await attempt("other_run_dots", () => raw("127.0.0.1", GATEWAY_PORT, "GET " + me + "../another-run/mcp/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"));
await attempt("other_run_escaped", () => raw("127.0.0.1", GATEWAY_PORT, "GET " + me + "%2E%2e/another-run/mcp/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"));
await attempt("other_run_absolute", () => raw("127.0.0.1", GATEWAY_PORT, "GET http://127.0.0.1" + other + " HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"));
// A second request smuggled behind an allowed one on the same connection.
await attempt("pipelined", () => raw("127.0.0.1", GATEWAY_PORT,
  "GET " + me + "mcp/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nGET " + other + "mcp/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"));
// The web app's other paths.
await attempt("web_api", () => get("http://127.0.0.1:" + GATEWAY_PORT + "/api/runs/"));
await attempt("web_admin", () => get("http://127.0.0.1:" + GATEWAY_PORT + "/admin/"));
// The database and Redis: by their compose names, on the host's addresses, on the
// container's loopback, and asked of every other port listening there (the relay's proxy).
await attempt("postgres_dns", () => dns.lookup("postgres"));
await attempt("redis_dns", () => dns.lookup("redis"));
await attempt("postgres_bridge", () => raw("172.17.0.1", 5432));
await attempt("redis_bridge", () => raw("172.17.0.1", 6379));
await attempt("postgres_loopback", () => raw("127.0.0.1", 5432));
await attempt("redis_loopback", () => raw("127.0.0.1", 6379));
const ports = listening();
got.ports = ports.join(",");
for (const port of ports) {
  await attempt("proxy_postgres_" + port, () => raw("127.0.0.1", port, "CONNECT host.docker.internal:5432 HTTP/1.1\\r\\n\\r\\n"));
  await attempt("proxy_redis_" + port, () => raw("127.0.0.1", port, "CONNECT 172.17.0.1:6379 HTTP/1.1\\r\\n\\r\\n"));
  await attempt("proxy_provider_" + port, () => raw("127.0.0.1", port, "CONNECT api.anthropic.com:443 HTTP/1.1\\r\\n\\r\\n"));
  await attempt("proxy_web_" + port, () => raw("127.0.0.1", port, "GET http://127.0.0.1:" + process.env.GATEWAY_HOST_PORT + "/api/runs/ HTTP/1.1\\r\\n\\r\\n"));
}
// The Docker socket, and the relay (another uid): its streams and a signal.
await attempt("docker_socket", () => unix("/var/run/docker.sock"));
const relay = fs.readdirSync("/proc").filter((p) => /^\\d+$/.test(p)).find((p) => {
  try { return fs.readFileSync("/proc/" + p + "/cmdline", "utf8").split("\\0")[1] === "/opt/harness/relay.py"; } catch (e) { return false; }
});
got.relay = relay ? "found" : "none";
await attempt("relay_stdout", () => { fs.writeFileSync("/proc/" + relay + "/fd/1", "\\0\\0\\0\\1\\2\\0\\0\\0\\0"); return "written"; });
await attempt("relay_signal", () => { process.kill(Number(relay), "SIGKILL"); return "killed"; });
// Still standing: the gateway answers afterwards.
await attempt("gateway_after", () => get(gateway + "/mcp/", { method: "POST", body: "{}" }));
"""
)


@pytest.mark.docker
def test_it_refuses_and_records_everything_a_hostile_agent_tries(agent: Agent) -> None:
    result, stdout, stderr = agent.node(HOSTILE, GATEWAY_HOST_PORT=str(agent.gateway.port), timeout=120)
    assert result.exit_code == 0, stderr
    got = outcome(stdout)
    ports = [p for p in got.pop("ports").split(",") if p]
    assert len(ports) == 1, got  # the relay's proxy port
    assert got.pop("relay") == "found"
    assert got.pop("gateway_after").startswith("reached: "), got
    reached = {name: value for name, value in got.items() if not value.startswith("failed: ")}
    assert reached == {}, reached
    assert got["docker_socket"] == "failed: ENOENT"
    assert got["relay_stdout"] == "failed: EACCES" and got["relay_signal"] == "failed: EPERM", got
    assert got["postgres_bridge"] == got["redis_bridge"] == "failed: ENETUNREACH", got
    assert got["postgres_loopback"] == got["redis_loopback"] == "failed: ECONNREFUSED", got
    for name in ("other_run", "other_run_dots", "other_run_escaped", "other_run_absolute", "web_api", "web_admin"):
        assert "403" in got[name], (name, got[name])
    # The gateway saw the run's own paths alone: the pipelined request never reached it.
    mine = f"/agent/runs/{agent.run_id}/mcp/"
    assert agent.gateway.paths == [mine, mine], agent.gateway.paths
    refused = [c for c in agent.connections() if not c["allowed"]]
    said = {(c["method"], c["host"], c["port"]) for c in refused}
    # Names looked up: refused and recorded (Node may ask for IPv4 and IPv6).
    assert {("DNS", "api.anthropic.com", 53), ("DNS", "postgres", 53), ("DNS", "redis", 53)} <= said, said
    # Paths outside the run's, on the gateway's forward: refused and recorded with why.
    outside = [c for c in refused if "only plain paths under" in c["reason"]]
    assert len(outside) == 6, outside
    assert {(c["host"], c["port"]) for c in outside} == {("127.0.0.1", agent.gateway.port)}
    # The relay's proxy port lets nothing through, and says so.
    assert int(ports[0]) != GATEWAY_PORT
    via_proxy = {(c["host"], c["port"]): c["reason"] for c in refused if c["method"] in ("CONNECT", "GET") and c not in outside}
    assert set(via_proxy) == {
        ("host.docker.internal", 5432),
        ("172.17.0.1", 6379),
        ("api.anthropic.com", 443),
        ("127.0.0.1", agent.gateway.port),
    }, via_proxy
    assert "not on check agent's egress list" in via_proxy[("host.docker.internal", 5432)]
    assert "not on check agent's egress list" in via_proxy[("api.anthropic.com", 443)]
    assert "raw address" in via_proxy[("172.17.0.1", 6379)] and "raw address" in via_proxy[("127.0.0.1", agent.gateway.port)]
    # The smuggled request: the connection's event says it was cut.
    allowed = [c for c in agent.connections() if c["allowed"]]
    assert len(allowed) == 2 and sum("second request" in c["reason"] for c in allowed) == 1, allowed


def in_background(run: Callable[[], AgentResult]) -> tuple[threading.Thread, list[AgentResult]]:
    results: list[AgentResult] = []
    thread = threading.Thread(target=lambda: results.append(run()), daemon=True)
    thread.start()
    return thread, results


@pytest.mark.docker
def test_it_ends_the_agent_within_two_seconds_of_a_kill(agent: Agent, docker_engine: docker.DockerClient) -> None:
    started = threading.Event()

    def output(_stream: str, data: bytes) -> None:
        if b"running" in data:
            started.set()

    thread, results = in_background(
        lambda: agent.box.run(
            ["node", "-e", "console.log('running'); setInterval(() => {}, 1000)"], agent.env(), on_output=output, timeout_seconds=120
        )
    )
    assert started.wait(30)
    killed_at = time.monotonic()
    agent.box.kill()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - killed_at < 2.0
    [result] = results
    assert result.killed and result.exit_code is None
    with pytest.raises(NotFound):
        docker_engine.api.inspect_container(agent.box.id)


@pytest.mark.docker
def test_it_stops_the_agent_at_its_deadline(agent: Agent) -> None:
    started = time.monotonic()
    result, stdout, _ = agent.node("console.log('spinning'); for (;;) {}", timeout=3)
    assert result.timed_out and result.exit_code is None and not result.killed
    assert 3 <= time.monotonic() - started < 6
    assert "spinning" in stdout
    # The container is still there for what comes next, with nothing of the agent's left.
    again, stdout, _ = agent.node("console.log('after')")
    assert again.exit_code == 0 and "after" in stdout


@pytest.mark.docker
def test_it_writes_the_agent_s_files_into_its_home_before_it_starts(agent: Agent) -> None:
    files = {".claude/settings.json": '{"permissions": {}}\n', ".codex/config.toml": 'model = "m"\n', "top.txt": "top\n"}
    out: list[bytes] = []
    reader = (
        "const fs = require('fs'); const h = process.env.HOME; const rows = {};"
        "for (const p of ['.claude/settings.json', '.codex/config.toml', 'top.txt', '.claude']) {"
        " const s = fs.statSync(h + '/' + p);"
        " rows[p] = [(s.mode & 0o777).toString(8), s.uid, s.isDirectory() ? '' : fs.readFileSync(h + '/' + p, 'utf8')]; }"
        "console.log(JSON.stringify(rows));"
    )
    result = agent.box.run(
        ["node", "-e", reader],
        agent.env(),
        files,
        on_output=lambda stream, data: out.append(data) if stream == "stdout" else None,
        timeout_seconds=60,
    )
    assert result.exit_code == 0
    rows = json.loads(b"".join(out))
    assert rows == {
        ".claude/settings.json": ["600", 1000, files[".claude/settings.json"]],
        ".codex/config.toml": ["600", 1000, files[".codex/config.toml"]],
        "top.txt": ["600", 1000, "top\n"],
        ".claude": ["700", 1000, ""],
    }
    with pytest.raises(ValueError):
        agent.box.write_files({"../etc/passwd": "x"})


RUNTIME_PROBE = script(
    """
await attempt("gateway", () => get(gateway + "/mcp/", { method: "POST", body: "{}" }));
await attempt("provider_dns", () => dns.lookup("api.anthropic.com"));
await attempt("other_run", () => get("http://127.0.0.1:" + GATEWAY_PORT + "/agent/runs/another-run/mcp/"));
await attempt("bridge", () => raw("172.17.0.1", 5432));
"""
)


@pytest.mark.docker
@pytest.mark.slow
def test_it_keeps_the_agent_to_the_gateway_under_each_runtime(
    agent_image: str, runtime_engine: RuntimeEngine, docker_engine: docker.DockerClient, tmp_path: Path
) -> None:
    if runtime_engine.client is not docker_engine and runtime_engine.runtime not in (docker_engine.info().get("Runtimes") or {}):
        pytest.skip(f"{runtime_engine.runtime} is on a private engine, which has no agent image")
    with agent_container(agent_image, tmp_path, runtime_engine.runtime) as agent:
        result, stdout, stderr = agent.node(RUNTIME_PROBE, timeout=120)
        assert result.exit_code == 0, stderr
        got = outcome(stdout)
        assert got["gateway"].startswith("reached: "), got
        assert got["provider_dns"].startswith("failed: ") and "403" in got["other_run"], got
        assert got["bridge"].startswith("failed: "), got
        assert ("DNS", "api.anthropic.com") in {(c["method"], c["host"]) for c in agent.connections()}


FORWARD = Forward("web", 8000, "/agent/runs/r1/")


def forwarded(target: str, *headers: str) -> bytes:
    return forward_head("\r\n".join([f"POST {target} HTTP/1.1", "Host: 127.0.0.1:8787", *headers]).encode(), FORWARD).forward


def test_it_forwards_a_request_under_the_run_s_prefix_to_the_gateway_as_it_is_named() -> None:
    sent = forwarded("/agent/runs/r1/mcp/?session=a:b", "Content-Length: 2", "Connection: keep-alive", "Authorization: Bearer t")
    assert sent == (
        b"POST /agent/runs/r1/mcp/?session=a:b HTTP/1.1\r\nHost: web:8000\r\nContent-Length: 2\r\n"
        b"Authorization: Bearer t\r\nConnection: close\r\n\r\n"
    )
    request = forward_head(b"GET /agent/runs/r1/gemini/v1beta/models/m:streamGenerateContent HTTP/1.1\r\nHost: x", FORWARD)
    assert (request.method, request.host, request.port, request.body) == ("GET", "web", 8000, 0)


@pytest.mark.parametrize(
    "target",
    [
        "/agent/runs/r2/mcp/",
        "/agent/runs/r1",
        "/agent/runs/r10/mcp/",
        "/api/runs/",
        "/agent/runs/r1/../r2/mcp/",
        "/agent/runs/r1/./mcp/",
        "/agent/runs/r1/..",
        "/agent/runs/r1/%2e%2E/r2/",
        "/agent/runs/r1/%2F..%2Fr2/",
        "/agent/runs/r1/..%5cr2/",
        "/agent/runs/r1//mcp/",
        "/agent/runs/r1/..;/r2/",
        "/agent/runs/r1/\\../r2/",
        "http://web:8000/agent/runs/r1/mcp/",
        "*",
        "/agent/runs/r1/\u00e9",
    ],
)
def test_it_refuses_a_path_outside_the_run_s_prefix_in_any_spelling(target: str) -> None:
    with pytest.raises(EgressRefused, match="only plain paths under /agent/runs/r1/"):
        forwarded(target)


def test_it_refuses_a_forwarded_head_a_server_could_read_differently() -> None:
    for headers, why in [
        (("Transfer-Encoding: chunked",), "Transfer-Encoding"),
        (("Content-Length: 2", "Content-Length: 3"), "not one number"),
        ((" folded",), "folded"),
    ]:
        with pytest.raises(EgressRefused, match=why):
            forwarded("/agent/runs/r1/mcp/", *headers)
    with pytest.raises(EgressRefused, match="not an HTTP/1 request"):
        forward_head(b"POST /agent/runs/r1/mcp/ HTTP/2\r\n", FORWARD)
    with pytest.raises(ValueError, match="plain path ending in '/'"):
        Forward("web", 8000, "/agent/runs/r1")


def test_it_takes_the_gateway_as_plain_http_and_the_run_s_paths() -> None:
    gateway = Gateway.for_run("http://web:8000", "r1")
    assert (gateway.host, gateway.port, gateway.prefix) == ("web", 8000, "/agent/runs/r1/")
    assert gateway.local_url == f"http://127.0.0.1:{GATEWAY_PORT}/agent/runs/r1"
    assert Gateway.for_run("http://harness.example/", "r1").port == 80
    for wrong in ("https://web:8443", "http://web:8000/agent/", "web:8000", "http://web:8000?x=1"):
        with pytest.raises(ValueError, match="must be http://host"):
            Gateway.for_run(wrong, "r1")


def test_it_writes_only_plain_paths_under_the_agent_s_home() -> None:
    for wrong in ("../x", "/etc/passwd", "a/../../x", "", "./x", "a//b", "a/"):
        with pytest.raises(ValueError, match="plain path under its home"):
            home_archive({wrong: "x"})
