"""Egress through the product's own path: a run created and advanced as a worker
does (runs.runtime, the database-backed event store, the real sandbox), whose check
has network to one destination: its connections are the run's Event rows, tied to
the check's call, and the report names where the check went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from runs.models import Event
from runs.runtime import advance, create_run
from runs.services import report_of
from tests.helpers import new_policy_version
from tests.package_index import serve_index
from tests.runs_waiting import DEMO_CONTRACT

FETCH = "import urllib.request, sys; print(urllib.request.urlopen(f'http://localhost:{sys.argv[1]}/simple/tinydep/', timeout=10).status)"


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_it_records_a_checks_connections_as_the_runs_events_and_in_its_report(
    tmp_path: Path, settings: Any, operator: User, docker_engine: Any
) -> None:
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.SPOOL_DIR = tmp_path / "spool"
    with serve_index(tmp_path / "index") as index:
        check = {
            "check_id": "net",
            "command": ["python3", "-c", FETCH, str(index.port)],
            "egress": [{"host": "localhost", "port": index.port}],
        }
        new_policy_version(checks=[check])
        contract = {**DEMO_CONTRACT, "verification_targets": ["net"]}
        script = {
            "kind": "scripted",
            "script": [{"tool": "run_check", "args": {"check_id": "net"}}, {"tool": "finish", "args": {"summary": "checked"}}],
        }
        run = create_run(contract, script, operator, enqueue=False)
        assert advance(str(run.pk)) in ("complete", "stopped")
    rows = list(Event.objects.filter(run=run).order_by("seq"))
    [receipt] = [r for r in rows if r.type == "receipt_recorded" and r.payload["receipt"]["data"].get("check_id") == "net"]
    assert receipt.payload["receipt"]["data"]["exit_code"] == 0, receipt.payload["receipt"]["data"]["output"]
    [connection] = [r for r in rows if r.type == "egress_connection"]
    assert connection.call_id == receipt.call_id is not None
    assert (connection.payload["host"], connection.payload["port"], connection.payload["allowed"]) == ("localhost", index.port, True)
    assert connection.payload["bytes_in"] > 0
    [evidence] = report_of(run)["evidence"]
    assert [(d["host"], d["port"], d["allowed"], d["connections"]) for d in evidence["egress"]] == [("localhost", index.port, True, 1)]
