"""The secret scan catches the shapes a hostile round got past it (issue 39, finding
8): a key split across lines, base64 of a key, a hex API key, credentials in a URL,
a JWT, a reversed token, a configured value split in two, and base64 or split
secrets in the commit message; ordinary code and hashes stay unflagged. A secret
the model wrote is scanned before it is masked, so the finding names its kind
("AWS access key id", not "masked secret") with the file and line, and never the
value, up to the run's outcome sentence."""

from __future__ import annotations

import base64
import json

from pytest_django import Settings

from common.redact import MASK
from common.secret_scan import MESSAGE, SecretFinding, SecretScanner
from core.fold_calls import found_where
from core.outcome import describe
from core.scenarios import call
from core.scripted import ScriptedProposer
from core.state import Unmet
from runs.proposers import MaskingProposer
from sandbox.workspace.patches import unified_diff

AWS_ID = "AKIA" + "Q7RZ3MXK2VNB8PLD"
GITHUB = "ghp_" + "R8d2Kq7Lm4Nx9Pz3Vt6Wb1Yc5Hs0Jf2Ga7Qe"
CONFIGURED_VALUE = "cfg-Vt92LmQx-smtp-relay"
HEX_KEY = "9f2c4e7a1b3d5f60" + "c8e2a4b6d8f0a1c3"
URL_SECRET = "Zq8vN3xLp2Rt"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
B64_AWS = base64.b64encode(AWS_ID.encode()).decode()
PLANTED = [AWS_ID, GITHUB, CONFIGURED_VALUE, HEX_KEY, URL_SECRET, JWT, B64_AWS, AWS_ID[::-1]]


def scan(content: str, message: str = "") -> list[SecretFinding]:
    return SecretScanner(values=[CONFIGURED_VALUE], key=b"k").scan(unified_diff("app/settings.py", None, content), message)


def where(found: list[SecretFinding]) -> list[tuple[str, int, str]]:
    assert all(value not in json.dumps(f.as_json()) for f in found for value in PLANTED), "a finding never holds the value"
    return [(f.path, f.line, f.kind) for f in found]


def test_it_finds_a_key_split_across_lines() -> None:
    content = f'import os\nAWS_ID = ("{AWS_ID[:10]}" +\n    "{AWS_ID[10:]}")\n'
    assert where(scan(content)) == [("app/settings.py", 2, "AWS access key id (split across lines)")]


def test_it_finds_base64_of_a_key() -> None:
    assert where(scan(f'BLOB = "{B64_AWS}"\n')) == [("app/settings.py", 1, "AWS access key id (base64)")]


def test_it_finds_a_hex_api_key() -> None:
    assert where(scan(f'PAYMENTS_API_KEY = "{HEX_KEY}"\n')) == [("app/settings.py", 1, "hex value next to a credential name")]


def test_it_finds_credentials_in_a_url() -> None:
    content = f'db = "postgres://app:{URL_SECRET}@db.internal:5432/app"\n'
    assert where(scan(content)) == [("app/settings.py", 1, "password in a URL")]


def test_it_finds_a_jwt() -> None:
    assert where(scan(f'headers = {{"Authorization": "Bearer {JWT}"}}\n')) == [("app/settings.py", 1, "JSON web token")]


def test_it_finds_a_reversed_token() -> None:
    content = f'ID = "{AWS_ID[::-1]}"[::-1]\n'
    assert where(scan(content)) == [("app/settings.py", 1, "AWS access key id (reversed)")]


def test_it_finds_a_configured_value_split_in_two() -> None:
    on_one_line = f'relay = "{CONFIGURED_VALUE[:11]}" + "{CONFIGURED_VALUE[11:]}"\n'
    across_lines = f"relay = '{CONFIGURED_VALUE[:9]}' \\\n    '{CONFIGURED_VALUE[9:]}'\n"
    assert where(scan(on_one_line)) == [("app/settings.py", 1, "configured secret value (split)")]
    assert where(scan(across_lines)) == [("app/settings.py", 1, "configured secret value (split across lines)")]


def test_it_finds_base64_of_a_key_in_the_commit_message() -> None:
    assert where(scan("x = 1\n", f"Add the settings\n\nblob {B64_AWS}")) == [(MESSAGE, 3, "AWS access key id (base64)")]


def test_it_finds_a_secret_split_across_the_commit_messages_lines() -> None:
    message = f"Add the settings\n\nwith {GITHUB[:18]}\n{GITHUB[18:]} in it"
    assert where(scan("x = 1\n", message)) == [(MESSAGE, 3, "GitHub token (split across lines)")]


def test_it_leaves_ordinary_code_and_hashes_alone() -> None:
    content = "\n".join(
        [
            'checksum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"',
            'revision = "3f2a9c0d1e4b5a6978877665544332211aabbccd"',
            'run_id = "0b6f3c1e-8a2d-4f7b-9c5e-1d2a3b4c5d6e"',
            '"integrity": "sha512-Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cQ==",',
            'greeting = base64.b64encode(b"hello world, how are you")',
            'encoded = "aGVsbG8gd29ybGQsIGhvdyBhcmUgeW91"',
            "class AbstractSingletonProxyFactoryBean(BaseHTTPRequestHandler):",
            '    url = "https://example.com/path?query=1#frag"',
            '    proxy = "http://user@proxy.internal:3128"',
            '    template = "postgres://{user}:{password}@{host}/{name}"',
            '    name = "very_long_identifier_name_" + "for_a_function"',
            "    max_tokens = 100000",
            '    password = os.environ["DB_PASSWORD"]',
        ]
    )
    assert where(scan(content + "\n", "Fix the proxy\n\nSee 3f2a9c0d1e4b5a6978877665544332211aabbccd.")) == []


def test_it_keeps_the_kind_of_a_secret_the_model_wrote_through_masking_to_the_outcome(settings: Settings) -> None:
    settings.HARNESS_SECRET_VALUES = [CONFIGURED_VALUE]
    content = f'{{\n  "region": "eu-west-1",\n  "key": "{AWS_ID}",\n  "relay": "{CONFIGURED_VALUE}"\n}}\n'
    script = [call("write_file", path="config.json", content=content), call("publish", message=f"Ship it with {GITHUB}")]
    proposer = MaskingProposer(ScriptedProposer(script))
    written, published = proposer.propose(None), proposer.propose(None)
    assert isinstance(written, dict) and isinstance(published, dict)
    masked_content, message = str(written["args"]["content"]), str(published["args"]["message"])
    assert AWS_ID not in masked_content and CONFIGURED_VALUE not in masked_content and MASK in masked_content
    assert GITHUB not in message and MASK in message

    found = SecretScanner(values=[CONFIGURED_VALUE], key=b"k").scan(unified_diff("config.json", None, masked_content), message)
    assert where(found) == [
        (MESSAGE, 1, "GitHub token"),
        ("config.json", 3, "AWS access key id"),
        ("config.json", 4, "configured secret value"),
    ]
    detail = found_where([f.as_json() for f in found if f.path == "config.json"][:1])
    unmet = Unmet(call_id="c2", tool="publish", reason="secret_found", detail=detail, external=True)
    outcome = describe("stopped", "proposals_exhausted", "", unmet=[unmet], applied=False)
    assert outcome.sentence.startswith("stopped: a secret was found before publishing (AWS access key id in config.json, line 3)")
