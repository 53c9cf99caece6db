"""What every process pays to start: ``django.setup()`` (the web server, each worker,
beat, every command and test session) and the worker's tasks module import no
Model Context Protocol SDK. The SDK is about a third of the worker's import time
(bench/startup.py); only a run whose project names an MCP server loads it, on its
first conversation (sandbox/tools/mcp.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SDK = ("mcp", "mcp_types")
LOADED = "import json, sys; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {sdk!r})))"


def loaded_after(code: str) -> list[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "harness_site.settings", "DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", f"{code}; {LOADED.format(sdk=SDK)}"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import django; django.setup()",
        "import django; django.setup(); import runs.tasks, runs.runtime",
    ],
    ids=["django_setup", "worker"],
)
def test_it_starts_without_the_mcp_sdk(code: str) -> None:
    assert loaded_after(code) == []


def test_it_loads_the_sdk_for_a_conversation() -> None:
    # The check above is only worth something if the probe sees the SDK when it is there.
    assert "mcp" in loaded_after("import django; django.setup(); import sandbox.mcp.client")
