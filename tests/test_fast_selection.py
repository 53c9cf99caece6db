"""`make test-fast` needs no Docker engine, docker-compose, sshd, Chromium or runsc:
its selection (the Makefile's own marker expression) of every test module that
mentions one of them passes with all of them hidden, as on a machine that never
installed them. A test that needs one must carry its marker (pytest.ini)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from harness_site.test_settings import PER_SESSION
from tests.hidden_tools import run_without

ROOT = Path(__file__).resolve().parent.parent
# What scripts/setup.sh installs or starts for the tests beyond Python, Redis and
# PostgreSQL; each is hidden by mounting an empty file over it.
HIDDEN = (
    "/usr/local/bin/docker",
    "/usr/bin/docker",
    "/usr/bin/docker-compose",
    "/usr/sbin/dockerd",
    "/usr/sbin/sshd",
    "/usr/bin/ssh",
    "/usr/bin/ssh-keygen",
    "/usr/bin/chromium",
    "/usr/bin/runsc",
    "/var/run/docker.sock",
)
MENTIONS = re.compile(r"docker|sshd|ssh_server|compose|chromium|playwright|runsc", re.IGNORECASE)


def fast_markers() -> str:
    makefile = (ROOT / "Makefile").read_text()
    expression: str
    (expression,) = re.findall(r"^test-fast:\n(?:\t.*\n)*?\t.* -m \"([^\"]+)\"", makefile, re.MULTILINE)
    return expression


@pytest.mark.slow
def test_it_runs_the_fast_selection_with_docker_compose_sshd_chromium_and_runsc_hidden(tmp_path: Path) -> None:
    modules = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").glob("test_*.py")
        if path.name != Path(__file__).name and MENTIONS.search(path.read_text())
    )
    assert "tests/test_git_ssh.py" in modules and "tests/test_unprivileged_web.py" in modules
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "-m", fast_markers(), *modules]
    # A session of its own (queue, scope, directories): not this one's.
    env = {name: value for name, value in os.environ.items() if name not in (*PER_SESSION, "HARNESS_TEST_WORKER")}
    done = run_without(HIDDEN, argv, scratch=tmp_path, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, (done.stdout[-6000:], done.stderr[-2000:])
    assert re.search(r"\d+ passed", done.stdout), done.stdout[-2000:]
