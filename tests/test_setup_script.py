"""scripts/setup.sh, the first step of `make test` and of .ci/run: on a machine that
has everything it does nothing but check (and start what is not running); without
root it names every package to install and installs nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures_services import ROOT
from tests.hidden_tools import run_without

# Both start or hide the engine's and the system's own tools, as root does.
pytestmark = [pytest.mark.docker]

SETUP = ["bash", str(ROOT / "scripts" / "setup.sh")]


def test_it_finds_everything_there_and_installs_nothing() -> None:
    done = subprocess.run(SETUP, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "installing" not in done.stderr and "not installed as pinned" not in done.stderr, done.stderr
    assert "[setup] sandbox image: harness-sandbox:" in done.stderr


def test_it_names_what_to_install_without_root(tmp_path: Path) -> None:
    # A user account (``id -u`` says 1000) on a machine without Chromium, sshd, runsc
    # and docker-compose, hidden in a private mount namespace.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    hidden = ["/usr/bin/chromium", "/usr/sbin/sshd", "/usr/bin/runsc", "/usr/bin/docker-compose"]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = run_without(hidden, SETUP, scratch=tmp_path, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "cannot continue: missing chromium docker-compose runsc openssh-server;" in done.stderr, done.stderr
    assert "apt-get install chromium docker-compose runsc openssh-server" in done.stderr
    assert "[setup] installing" not in done.stderr
