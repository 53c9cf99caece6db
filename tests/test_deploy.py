"""The deployment really runs: docker-compose.yml is started on this machine from the
images deploy/images/build.sh builds without a registry, and a run goes through it
using the published port only (sign in, create, wait for approval, grant as a second
user, complete, report). Then the stack goes down and up again and keeps every run
and approval, and `up -d --scale worker=3` starts three workers that share the next
runs. `make test-deploy` runs this file once (marker `deploy`; the usual passes leave
it out); a failure prints the services' logs, and everything the test started is
removed whatever happens (and checked gone: containers, network, volumes, the data).

HARNESS_COMPOSE picks the compose command (default `docker-compose`; `docker compose`
for the v2 plugin)."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from docker.errors import NotFound

from sandbox.container.pool import LABEL_POOL, POOL_DIR
from sandbox.container.spec import LABEL_RUN, ROLE_MAIN, run_of_name

pytestmark = pytest.mark.deploy

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples" / "demo"
APP_UID = 10001
SANDBOX_UID = 65534
PASSWORD = secrets.token_urlsafe(12)
UP_TIMEOUT = 600
RUN_TIMEOUT = 300


def say(message: str) -> None:
    print(f"[test-deploy] {message}", file=sys.stderr, flush=True)


def build_images() -> dict[str, str]:
    """deploy/images/build.sh's KEY=VALUE lines: the image tags compose runs."""
    out = subprocess.run(["bash", str(REPO / "deploy/images/build.sh")], check=True, stdout=subprocess.PIPE, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    project: str
    env_file: Path
    data_dir: Path
    port: int
    timings: dict[str, float] = field(default_factory=dict)
    # What the run test leaves for the tests after it.
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    sandbox_container: dict[str, Any] = field(default_factory=dict)
    watch_error: Exception | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def compose(self, *args: str, timeout: float = UP_TIMEOUT) -> str:
        command = [
            *shlex.split(os.environ.get("HARNESS_COMPOSE", "docker-compose")),
            "--project-name",
            self.project,
            "--env-file",
            str(self.env_file),
            "--file",
            str(REPO / "docker-compose.yml"),
            *args,
        ]
        # Compose prefers the caller's environment to the env file: pass on only what
        # finds the CLI and the engine (this process has the test settings' HARNESS_*).
        env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG")}
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def containers(self, service: str) -> list[dict[str, Any]]:
        client = docker.from_env()
        return [client.api.inspect_container(cid) for cid in self.compose("ps", "-a", "-q", service).split()]

    def container(self, service: str) -> dict[str, Any]:
        found = self.containers(service)
        assert len(found) == 1, f"{service}: expected one container, got {[c['Id'][:12] for c in found]}"
        return found[0]

    def up(self, *args: str) -> None:
        started = time.monotonic()
        self.compose("up", "-d", *args)
        self.wait_healthy()
        self.timings.setdefault("up", time.monotonic() - started)

    def wait_healthy(self, scale: dict[str, int] | None = None) -> None:
        """Every long-running service's containers healthy (or running, without a
        healthcheck), the one-shot ones exited 0; ``scale`` says how many containers a
        service has when it is not one."""
        deadline = time.monotonic() + UP_TIMEOUT
        while True:
            waiting = []
            for service in self.compose("config", "--services").split():
                found = self.containers(service)
                wanted = (scale or {}).get(service, 1)
                assert len(found) <= wanted, f"{service}: {len(found)} containers, expected {wanted}"
                if len(found) < wanted:
                    waiting.append(service)
                for container in found:
                    state = container["State"]
                    if service in ("migrate", "sandbox-image"):
                        assert state["Status"] != "exited" or state["ExitCode"] == 0, f"{service} failed: {state}"
                        ok = state["Status"] == "exited"
                    elif "Health" in state:
                        ok = state["Health"]["Status"] == "healthy"
                    else:
                        ok = state["Status"] == "running"
                    assert state["Status"] in ("created", "running", "exited") and not state.get("Restarting"), f"{service}: {state}"
                    if not ok:
                        waiting.append(f"{service} {container['Name']}")
            if not waiting:
                return
            assert time.monotonic() < deadline, f"not healthy after {UP_TIMEOUT} s: {waiting}"
            time.sleep(2)

    def logs(self) -> str:
        try:
            return self.compose("logs", "--no-color", "--tail=150", timeout=120)
        except Exception as exc:  # the logs are a diagnostic: never hide the failure
            return f"(no logs: {exc})"

    def api(self, method: str, path: str, token: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.url + path, headers={"Authorization": f"Token {token}"}, timeout=30, **kwargs)

    def token(self, username: str) -> str:
        answer = requests.post(self.url + "/api/auth/token/", data={"username": username, "password": PASSWORD}, timeout=30)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["token"])

    def wait_status(self, run_id: str, token: str, wanted: str) -> dict[str, Any]:
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            run = self.api("GET", f"/api/runs/{run_id}/", token).json()
            if run["status"] == wanted:
                return dict(run)
            assert run["status"] in ("pending", "running", "waiting_approval"), run
            assert time.monotonic() < deadline, f"run {run_id} is {run['status']}, not {wanted}, after {RUN_TIMEOUT} s"
            time.sleep(0.5)

    def remove(self) -> None:
        """Everything this stack created: containers, network, volumes, the run
        containers the worker started (labelled with the stack's scope), the data."""
        try:
            self.compose("down", "--volumes", "--remove-orphans", "--timeout", "20")
        finally:
            client = docker.from_env()
            for container in client.containers.list(all=True, filters={"label": f"harness.scope={self.project}"}):
                container.remove(force=True)
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this stack is still on the engine or the disk after ``remove``."""
        client = docker.from_env()
        project = {"label": f"com.docker.compose.project={self.project}"}
        found = [f"container {c.name}" for c in client.containers.list(all=True, filters=project)]
        found += [f"run container {c.name}" for c in client.containers.list(all=True, filters={"label": f"harness.scope={self.project}"})]
        found += [f"network {n.name}" for n in client.networks.list(filters=project)]
        found += [f"volume {v.name}" for v in client.volumes.list(filters=project)]
        return found + ([f"directory {self.data_dir}"] if self.data_dir.exists() else [])


def run_of_container(container: dict[str, Any], scope: str) -> str | None:
    """The run a container (as the engine inspects it) is the main container of: its
    run label, or, for one the worker's pool started (no run label), the run's name it
    was renamed to when a run took it; None for an idle pooled container."""
    return container["Config"]["Labels"].get(LABEL_RUN) or run_of_name(container["Name"].lstrip("/"), scope, ROLE_MAIN)


class ContainerWatch:
    """Inspects the first run container of a scope as soon as the engine reports it
    created for a run, or renamed to a run's (a pooled one taken): the worker removes
    it again when the run stops or waits."""

    def __init__(self, scope: str) -> None:
        self.seen: dict[str, Any] = {}
        self.error: Exception | None = None
        self._scope = scope
        self._client = docker.from_env()
        # Subscribed here, before the run exists, so its container cannot be missed.
        self._events = self._client.events(
            decode=True, filters={"type": "container", "event": ["create", "rename"], "label": f"harness.scope={scope}"}
        )
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ContainerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._events.close()
        self._thread.join(timeout=30)

    def _watch(self) -> None:
        try:
            for event in self._events:
                try:
                    found = self._client.api.inspect_container(event["id"])
                except NotFound:
                    continue
                # The pool's refills are created under names of no run.
                if run_of_container(found, self._scope):
                    self.seen = found
                    return
        except Exception as exc:  # the stream ends when __exit__ closes it
            self.error = exc


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    started = time.monotonic()
    images = build_images()
    built = time.monotonic() - started
    project = f"harness-deploy-{secrets.token_hex(4)}"
    data_dir = Path(tempfile.mkdtemp(prefix=f"{project}-"))
    port = free_port()
    env_file = data_dir / "compose.env"
    (data_dir / "data").mkdir()
    (data_dir / "sources").mkdir()
    # The web service (the image's unprivileged user) prepares workspaces here.
    os.chown(data_dir / "data", APP_UID, APP_UID)
    settings = {
        "SECRET_KEY": secrets.token_urlsafe(48),
        "POSTGRES_PASSWORD": secrets.token_hex(16),
        "HARNESS_HTTP_PORT": f"127.0.0.1:{port}",
        "HARNESS_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{port}",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "HARNESS_DATA_DIR": str(data_dir / "data"),
        "HARNESS_SOURCES_DIR": str(data_dir / "sources"),
        "HARNESS_SANDBOX_SCOPE": project,
        "WORKER_CONCURRENCY": "1",
        **images,
    }
    env_file.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    result = Stack(project=project, env_file=env_file, data_dir=data_dir, port=port)
    result.timings["images"] = built
    failed_before = request.session.testsfailed
    say(f"project {project}, http://127.0.0.1:{port}/, images built or found in {built:.0f} s: {images}")
    try:
        try:
            result.up()
            # In one argument: a random password may begin with "-", which argparse
            # would otherwise take for an option.
            result.compose("exec", "-T", "web", "python", "manage.py", "create_demo_users", f"--password={PASSWORD}")
        except BaseException:
            say("the stack did not come up; the services' logs:\n" + result.logs())
            raise
        yield result
        if request.session.testsfailed > failed_before:
            say("a deployment test failed; the services' logs:\n" + result.logs())
    finally:
        started = time.monotonic()
        result.remove()
        result.timings["down"] = time.monotonic() - started
        say("timings (s): " + json.dumps({key: round(value, 1) for key, value in result.timings.items()}))
        left = result.leftovers()
        assert not left, f"left behind: {left}"


def test_it_serves_the_pages_and_static_files_on_the_published_port(stack: Stack) -> None:
    for path in ("/accounts/login/", "/static/css/harness.css", "/static/js/harness.js", "/static/admin/css/base.css"):
        answer = requests.get(stack.url + path, timeout=30)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])


def demo_run(stack: Stack, workspace: str) -> tuple[str, dict[str, Any]]:
    """Create a run of the demo contract and script from this workspace as the
    operator, wait until it asks for approval; return it and its pending request."""
    operator, reviewer = stack.token("operator"), stack.token("reviewer")
    contract = json.loads((DEMO / "contract.json").read_text())
    contract["workspace"] = {"kind": "path", "path": workspace}
    body = {"contract": contract, "proposer": {"kind": "scripted", "script": json.loads((DEMO / "proposals.json").read_text())}}
    created = stack.api("POST", "/api/runs/", operator, json=body)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    stack.wait_status(run_id, operator, "waiting_approval")
    pending = stack.api("GET", f"/api/approvals/?run={run_id}&status=pending", reviewer).json()["results"]
    assert [request["tool"] for request in pending] == ["publish"]
    return run_id, pending[0]


def remember(stack: Stack, run_id: str) -> None:
    """What the restart must keep: the run, its approval requests and its events."""
    operator, reviewer = stack.token("operator"), stack.token("reviewer")
    events = stack.api("GET", f"/api/runs/{run_id}/events/?after=0&limit=200", operator).json()
    assert not events["has_more"]
    stack.runs[run_id] = {
        "run": stack.api("GET", f"/api/runs/{run_id}/", operator).json(),
        "approvals": stack.api("GET", f"/api/approvals/?run={run_id}", reviewer).json()["results"],
        "events": events["events"],
    }


def test_it_runs_the_demo_contract_through_approval_by_a_second_user(stack: Stack) -> None:
    started = time.monotonic()
    with ContainerWatch(stack.project) as watch:
        run_id, request = demo_run(stack, "examples/orders")
    stack.sandbox_container, stack.watch_error = watch.seen, watch.error

    operator, reviewer = stack.token("operator"), stack.token("reviewer")
    granted = stack.api("POST", f"/api/approvals/{request['id']}/grant/", reviewer)
    assert granted.status_code == 200, granted.text
    stack.wait_status(run_id, operator, "complete")

    report = stack.api("GET", f"/api/runs/{run_id}/report/", operator)
    assert report.status_code == 200, report.text
    assert report.json()["completed"] is True
    assert report.json()["changed_files"] == ["orders/total.py"]
    approval = stack.api("GET", f"/api/approvals/{request['id']}/", reviewer).json()
    assert (approval["status"], approval["decided_by"]) == ("consumed", "reviewer")
    remember(stack, run_id)
    stack.timings["run"] = time.monotonic() - started


def test_it_starts_runs_from_the_sources_directory(stack: Stack) -> None:
    sources = stack.data_dir / "sources"
    shutil.copytree(REPO / "examples" / "orders", sources / "orders")
    run_id, _request = demo_run(stack, str(sources / "orders"))
    remember(stack, run_id)


def test_it_starts_the_run_container_locked_down(stack: Stack) -> None:
    container = stack.sandbox_container
    assert container, f"the worker started no run container that could be inspected ({stack.watch_error!r})"
    host = container["HostConfig"]
    images = {line.split("=", 1)[1] for line in stack.env_file.read_text().splitlines() if line.startswith("HARNESS_SANDBOX_IMAGE=")}
    assert container["Config"]["Image"] in images
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Privileged"] is False
    assert container["Config"]["User"] == f"{SANDBOX_UID}:{SANDBOX_UID}"
    assert host["Memory"] > 0 and host["NanoCpus"] > 0 and host["PidsLimit"] > 0
    # Only the run's workspace: no Docker socket, no data directory. A pooled container
    # was made on an empty slot directory of its pool's, which the take moved the run's
    # workspace into and renamed over it (sandbox/container/pool.py): the engine still
    # names the slot's path.
    workspaces = f"{stack.data_dir}/data/workspaces"
    owner = container["Config"]["Labels"].get(LABEL_POOL)
    binds = [(mount["Destination"], mount["Source"]) for mount in container["Mounts"] if mount["Type"] == "bind"]
    if owner is None:
        assert binds == [("/workspace", f"{workspaces}/{run_of_container(container, stack.project)}/workspace")]
    else:
        assert Path(owner).parent == Path(workspaces, POOL_DIR), owner
        [(destination, source)] = binds
        assert destination == "/workspace" and Path(source).parent == Path(owner), binds


def test_it_runs_the_web_server_unprivileged(stack: Stack) -> None:
    pid = stack.container("web")["State"]["Pid"]
    uids = next(line.split()[1:] for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))
    assert set(uids) == {str(APP_UID)}


def test_it_keeps_runs_and_approvals_across_down_and_up(stack: Stack) -> None:
    assert stack.runs, "no runs to look for: the run tests failed"
    started = time.monotonic()
    stack.compose("down", "--timeout", "30")
    assert stack.compose("ps", "-a", "-q").split() == []
    stack.up()
    stack.timings["down_up"] = time.monotonic() - started

    # The same tokens still sign in: the users and their tokens survived too.
    operator, reviewer = stack.token("operator"), stack.token("reviewer")
    listed = stack.api("GET", "/api/runs/", operator).json()
    assert sorted(item["id"] for item in listed["results"]) == sorted(stack.runs)
    for run_id, before in stack.runs.items():
        run = stack.api("GET", f"/api/runs/{run_id}/", operator).json()
        assert (run["status"], run["task_id"], run["contract"]) == (
            before["run"]["status"],
            before["run"]["task_id"],
            before["run"]["contract"],
        )
        assert stack.api("GET", f"/api/approvals/?run={run_id}", reviewer).json()["results"] == before["approvals"]
        events = stack.api("GET", f"/api/runs/{run_id}/events/?after=0&limit=200", operator).json()["events"]
        # A waiting run may be looked at again after the restart: nothing is lost or changed.
        assert events[: len(before["events"])] == before["events"]


SCALED_WORKERS = 3
SCALED_RUNS = 6


def test_it_runs_on_three_worker_containers_after_scale_worker_3(stack: Stack) -> None:
    """`up -d --scale worker=3`: three worker containers, each a host of its own (its
    container id: HARNESS_WORKER_HOST is unset), take runs from the shared queue; runs
    started at once all complete, and more than one container drove them."""
    started = time.monotonic()
    stack.compose("up", "-d", "--scale", f"worker={SCALED_WORKERS}")
    stack.wait_healthy({"worker": SCALED_WORKERS})
    stack.timings["scale_up"] = time.monotonic() - started
    workers = {container["Config"]["Hostname"] for container in stack.containers("worker")}
    assert len(workers) == SCALED_WORKERS, workers

    started = time.monotonic()
    operator, reviewer = stack.token("operator"), stack.token("reviewer")
    contract = json.loads((DEMO / "contract.json").read_text())
    body = {"contract": contract, "proposer": {"kind": "scripted", "script": json.loads((DEMO / "proposals.json").read_text())}}
    run_ids = []
    for _ in range(SCALED_RUNS):  # all queued before any is looked at: the workers share them
        created = stack.api("POST", "/api/runs/", operator, json=body)
        assert created.status_code == 201, created.text
        run_ids.append(created.json()["id"])
    for run_id in run_ids:
        stack.wait_status(run_id, operator, "waiting_approval")
        pending = stack.api("GET", f"/api/approvals/?run={run_id}&status=pending", reviewer).json()["results"]
        assert [request["tool"] for request in pending] == ["publish"], pending
        granted = stack.api("POST", f"/api/approvals/{pending[0]['id']}/grant/", reviewer)
        assert granted.status_code == 200, granted.text
    for run_id in run_ids:
        stack.wait_status(run_id, operator, "complete")
        report = stack.api("GET", f"/api/runs/{run_id}/report/", operator).json()
        assert report["completed"] is True and report["changed_files"] == ["orders/total.py"], report
    stack.timings["scaled_runs"] = time.monotonic() - started

    # Which host drove each run (Run.host: the worker container's hostname, its short id).
    ids = ",".join(f"'{run_id}'" for run_id in run_ids)
    rows = stack.compose(
        "exec", "-T", "postgres", "psql", "-U", "harness", "-d", "harness", "-Atc", f"SELECT id, host FROM runs_run WHERE id IN ({ids})"
    )
    hosts = dict(line.split("|", 1) for line in rows.split())
    say(f"{SCALED_RUNS} runs on {SCALED_WORKERS} workers, by host: {sorted(hosts.values())}")
    assert len(hosts) == SCALED_RUNS and set(hosts.values()) <= workers, (hosts, workers)
    assert len(set(hosts.values())) > 1, f"one worker container drove every run: {hosts}"
