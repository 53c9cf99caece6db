"""`make up` on someone else's machine: it uses what is already there and, where it
cannot install what is missing (no root, no apt), says exactly what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

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
