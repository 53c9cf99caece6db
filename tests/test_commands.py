"""Everything from a shell: run_task, approvals list/grant/deny, resume_run, with
their exit codes, against the real sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.helpers import run_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo"
CONTRACT, SCRIPT = str(DEMO / "contract.json"), str(DEMO / "proposals.json")


run = run_command


def test_it_runs_the_demo_to_the_approval_wait_and_on_to_completion(reviewer: User) -> None:
    code, out, _ = run("run_task", CONTRACT, "--script", SCRIPT, "--json")
    assert code == 10
    report = json.loads(out)
    assert {"run_id", "status", "proposals", "calls", "pending", "evidence", "events"} <= set(report)
    assert report["status"] == "waiting_approval"
    assert report["evidence"][0]["passed"] and report["evidence"][0]["image_digest"].startswith("sha256:")
    code, out, _ = run("approvals", "list", "--run", report["run_id"], "--json")
    [request] = json.loads(out)
    assert request["tool"] == "publish" and "orders/total.py" in request["diff"]
    code, out, _ = run("approvals", "grant", request["id"], "--user", reviewer.username)
    assert code == 0 and out.startswith("granted")
    code, out, _ = run("resume_run", report["run_id"], "--json")
    assert code == 0
    final = json.loads(out)
    assert final["status"] == "complete" and final["changed_files"] == ["orders/total.py"]


def test_it_stops_denied_after_a_denial_from_the_shell(reviewer: User) -> None:
    _, out, _ = run("run_task", CONTRACT, "--script", SCRIPT, "--json")
    run_id = json.loads(out)["run_id"]
    [request] = json.loads(run("approvals", "list", "--run", run_id, "--json")[1])
    code, _, err = run("approvals", "deny", request["id"], "--user", reviewer.username, "--reason", " ")
    assert code == 2 and "needs a reason" in err
    assert run("approvals", "deny", request["id"], "--user", reviewer.username, "--reason", "not today")[0] == 0
    code, out, _ = run("resume_run", run_id, "--json")
    assert code == 1 and json.loads(out)["status"] == "denied"


def test_it_exits_two_with_the_reason_for_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "contract.json"
    bad.write_text(json.dumps({"task_id": "x y"}))
    code, _, err = run("run_task", str(bad), "--script", SCRIPT)
    assert code == 2 and "task_id" in err and "objective" in err
    code, _, err = run("run_task", CONTRACT, "--script", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in err
    code, _, err = run("run_task", CONTRACT, "--script", SCRIPT, "--fault", "read_file:explode")
    assert code == 2 and "kind 'explode'" in err
    assert run("resume_run", "not-a-run")[0] == 2
    assert run("approvals", "grant", "nope", "--user", "x")[0] == 2


def test_it_injects_faults_and_exits_one_on_a_stop() -> None:
    code, out, _ = run("run_task", CONTRACT, "--script", SCRIPT, "--fault", "read_file:invalid_receipt", "--json")
    assert code == 1 and json.loads(out)["status"] == "receipt_invalid"
    code, out, _ = run("run_task", CONTRACT, "--script", SCRIPT, "--fault", "run_check:transient:2", "--json")
    report = json.loads(out)
    assert code == 10 and [e["type"] for e in report["events"]].count("retry") == 2
