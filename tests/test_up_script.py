"""`make up` on someone else's machine: it uses what is already there and, where it
cannot install what is missing (no root, no apt), says exactly what to install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.fixtures_services import ROOT

TOOLS = ("python3", "mkdir", "seq", "sleep", "tail", "cat", "dirname")


def up(tmp_path: Path, fakes: dict[str, str], **env: str) -> subprocess.CompletedProcess[str]:
    """scripts/up.sh with only the real tools it needs before the services, and
    ``fakes`` (name -> shell body) standing in for the rest."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    environment = {**os.environ, "PATH": str(bin_dir), "HARNESS_VAR_DIR": str(tmp_path / "var" / "new"), **env}
    return subprocess.run(["/bin/bash", str(ROOT / "scripts" / "up.sh")], env=environment, capture_output=True, text=True, timeout=120)


def test_it_creates_a_missing_var_dir_and_names_what_to_install_without_root(tmp_path: Path) -> None:
    # A user account on a machine without a Docker engine: the Redis of the test
    # environment answers; `docker info` fails; there is no dockerd and no root.
    result = up(tmp_path, {"docker": "exit 1", "id": "echo 1000"})
    assert result.returncode == 1
    assert (tmp_path / "var" / "new" / "log").is_dir(), "the var directory is created when missing"
    assert "no Docker engine answers and dockerd is not installed" in result.stderr
    assert "set DOCKER_HOST" in result.stderr and "apt-get install docker.io" in result.stderr
    assert "installing" not in result.stderr, "nothing is installed without root"


def test_it_names_a_var_dir_it_cannot_create(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = up(tmp_path, {"docker": "exit 1", "id": "echo 1000"}, HARNESS_VAR_DIR=str(blocker / "var"))
    assert result.returncode == 1 and f"HARNESS_VAR_DIR={blocker / 'var'} cannot be created" in result.stderr


def demo_runs(var: Path) -> list[str]:
    found = subprocess.run(
        ["python3", "manage.py", "shell", "-c", "from runs.models import Run; print(sorted(str(r.pk) for r in Run.objects.all()))"],
        cwd=ROOT,
        env={**os.environ, "HARNESS_VAR_DIR": str(var), "DJANGO_SETTINGS_MODULE": "harness_site.settings", "DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return found.stdout.strip().splitlines()[-1:]


@pytest.mark.docker
@pytest.mark.slow
def test_it_stops_what_it_started_and_keeps_what_is_there_on_a_second_up(tmp_path: Path) -> None:
    """make up, make down, make up again, make down: the same passwords, no second
    pair of demo runs, nothing it started still running after make down."""
    from tests.fixtures_web import free_port

    var = tmp_path / "var"
    scope = f"up-{uuid.uuid4().hex[:8]}"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")},
        "HARNESS_VAR_DIR": str(var),
        "HARNESS_UP_DETACH": "1",
        "PORT": str(free_port()),
        "MAIL_PORT": str(free_port()),
        "MAIL_PAGE_PORT": str(free_port()),
        "HARNESS_QUEUE": scope,
        "HARNESS_SANDBOX_SCOPE": scope,
        "WORKER_CONCURRENCY": "1",
    }

    def make(target: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["make", "-s", target], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    def recorded() -> list[int]:
        return [int(line.split()[1]) for line in (var / "up.pids").read_text().splitlines()]

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    try:
        first = make("up")
        assert first.returncode == 0, first.stderr[-3000:]
        passwords = json.loads((var / "demo_passwords").read_text())
        assert set(passwords) >= {"reviewer", "operator", "admin", "payments", "treasurer"}
        pids = recorded()
        assert len(pids) >= 3, "the mail catcher, the worker and the web server at least"
        runs = demo_runs(var)
        again = make("up")
        assert again.returncode != 0 and "already up" in again.stderr, "a second make up while up changes nothing"
        down = make("down")
        assert down.returncode == 0, down.stderr
        assert [pid for pid in pids if alive(pid)] == [], "make down stops every process make up recorded"
        assert not (var / "up.pids").exists()

        second = make("up")
        assert second.returncode == 0, second.stderr[-3000:]
        assert json.loads((var / "demo_passwords").read_text()) == passwords
        for name, password in passwords.items():
            assert f"{name:<9} password: {password}" in second.stdout, "the kept password is printed again"
        assert demo_runs(var) == runs, "no second pair of demo runs"
        pids = recorded()
    finally:
        make("down")
    assert [pid for pid in pids if alive(pid)] == []
