"""Bodies the API cannot take are refused in its own JSON shapes, naming the limit,
and leave nothing behind: JSON nested deeper than the parser's bound is a 400 before
it is decoded (100,000 levels were a 500), a body above DATA_UPLOAD_MAX_MEMORY_SIZE
is a 413 (it was Django's HTML 400 with no reason), too many query parameters a 400.
The depth is measured without recursion, brackets inside strings not counted."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from api.models import ApiToken
from api.parsers import MAX_JSON_DEPTH, json_depth
from runs.models import GlobalSwitch, Run
from tests.test_api import SCRIPT, SMALL_CONTRACT

if TYPE_CHECKING:
    from rest_framework.response import _MonkeyPatchedResponse  # the test client's response: only the stubs name it

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(operator: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {ApiToken.issue(operator)[1]}")
    return client


def post_raw(client: APIClient, path: str, text: str) -> _MonkeyPatchedResponse:
    # Django's generic takes bytes as they are (force_bytes); the stubs say str.
    return client.generic("POST", path, text.encode(), content_type="application/json")  # type: ignore[arg-type]


def nested(levels: int, inner: str = "0") -> str:
    return "[" * levels + inner + "]" * levels


def test_it_refuses_json_nested_100k_levels_with_a_400_naming_the_depth(api: APIClient) -> None:
    for path in ("/api/runs/", "/api/switch/", "/api/auth/token/"):
        response = post_raw(api, path, nested(100_000))
        assert response.status_code == 400, (path, response.content[:200])
        assert response.json() == {
            "body": [f"JSON parse error - arrays and objects nest 100000 levels deep; the limit is {MAX_JSON_DEPTH}"]
        }
    assert not Run.objects.exists()
    # Deep inside an object that is otherwise a good request: still refused as a whole.
    body = json.dumps({"contract": SMALL_CONTRACT, "proposer": SCRIPT})[:-1] + ', "extra": ' + nested(MAX_JSON_DEPTH) + "}"
    refused = post_raw(api, "/api/runs/", body)
    assert refused.status_code == 400 and f"{MAX_JSON_DEPTH + 1} levels deep" in refused.json()["body"][0]
    assert not Run.objects.exists()


def test_it_decodes_json_at_the_depth_limit_and_brackets_inside_strings(api: APIClient) -> None:
    # At the limit the body is decoded, and what is wrong with it is a field's problem.
    at_limit = post_raw(api, "/api/switch/", json.dumps({"admit_new": json.loads(nested(MAX_JSON_DEPTH - 1))}))
    assert at_limit.status_code == 400 and set(at_limit.json()) == {"admit_new"}
    contract = {**SMALL_CONTRACT, "objective": "[{" * 5_000}
    created = post_raw(api, "/api/runs/", json.dumps({"contract": contract, "proposer": SCRIPT}))
    assert created.status_code == 201, created.content[:300]
    assert Run.objects.get().contract["objective"] == "[{" * 5_000


def test_it_answers_a_body_over_the_upload_limit_with_a_json_413_naming_it(api: APIClient, operator: User) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    contract = {**SMALL_CONTRACT, "objective": "x" * (limit + 10)}
    text = json.dumps({"contract": contract, "proposer": SCRIPT})
    expected = f"the request body is {len(text)} bytes, more than the limit of {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)"
    for path in ("/api/runs/", "/api/switch/"):
        response = post_raw(api, path, text)
        assert response.status_code == 413 and response["Content-Type"] == "application/json"
        assert response.json() == {"body": [expected]}
    assert not Run.objects.exists() and GlobalSwitch.get().admit_new
    # The token endpoint reads forms too: the same answer for an oversize form.
    form = f"username={operator.username}&password={'p' * (limit + 10)}"
    token = APIClient().generic("POST", "/api/auth/token/", form, content_type="application/x-www-form-urlencoded")
    assert token.status_code == 413 and token.json()["body"][0].endswith(f"the limit of {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)")


def test_it_answers_too_many_query_parameters_with_a_json_400(api: APIClient) -> None:
    query = "&".join(f"p{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = api.get(f"/api/runs/?{query}")
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert response.json() == {
        "request": [f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} parameters (DATA_UPLOAD_MAX_NUMBER_FIELDS)"]
    }


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


BRACKETY = st.text(alphabet=st.sampled_from('[]{}"\\ax\n\u00e9'), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | BRACKETY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(BRACKETY, inner, max_size=4),
    max_leaves=30,
)


@given(JSON_VALUES, st.booleans())
def test_it_measures_the_depth_of_any_json_text_as_decoded(value: object, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert json_depth(text) == depth_of(value)
