"""The OpenAPI schema (issue 7): the checked-in copy is what the code generates, the
server serves it, and generated requests (schemathesis) get no server error and no
response that breaks it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import hypothesis
import pytest
import schemathesis
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from hypothesis import HealthCheck
from hypothesis import strategies as st
from schemathesis import checks
from schemathesis.specs.openapi.schemas import OpenApiSchema

from api.models import ApiToken
from approvals.models import ApprovalRequest
from harness_site.wsgi import application
from runs.approval_flow.gate import DjangoApprovals
from runs.services import drive_run
from tests.helpers import World

if TYPE_CHECKING:
    from schemathesis.specs.openapi.schemas import OpenApiCase  # the case schemathesis passes: a name for type checkers only

CHECKED_IN = Path(__file__).resolve().parent.parent / "docs" / "openapi.yaml"
REGENERATE = "python manage.py spectacular --validate --fail-on-warn --file docs/openapi.yaml"
# Existing objects the generated requests also aim at, so grant, deny, kill and the
# event reader run on real rows, not only on 404s.
KNOWN_IDS: dict[str, list[str]] = {}


def test_it_keeps_the_checked_in_schema_equal_to_the_generated_one(tmp_path: Path) -> None:
    generated = tmp_path / "openapi.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(generated))
    assert generated.read_text() == CHECKED_IN.read_text(), f"docs/openapi.yaml is out of date; run: {REGENERATE}"


def test_it_serves_the_schema_only_after_sign_in(client: Client, outsider: User) -> None:
    assert client.get("/api/schema/").status_code == 401
    client.force_login(outsider)
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert yaml.safe_load(response.content) == yaml.safe_load(CHECKED_IN.read_text())


@schemathesis.hook
def flatmap_path_parameters(context: schemathesis.HookContext, parameters: object) -> st.SearchStrategy[object]:
    if not isinstance(parameters, dict):
        return st.just(parameters)
    return st.fixed_dictionaries({name: st.sampled_from([value, *KNOWN_IDS.get(name, [])]) for name, value in parameters.items()})


@pytest.fixture
def api_schema(transactional_db: None, operator: User) -> Iterator[OpenApiSchema]:
    world = World()
    run = world.create(actor=operator)
    drive_run(run, world.environment(), DjangoApprovals(run))
    KNOWN_IDS["run_id"] = [str(run.pk)]
    KNOWN_IDS["approval_id"] = [str(ApprovalRequest.objects.get(run=run).pk)]
    signed_in = {"Authorization": f"Token {ApiToken.issue(operator)[1]}"}
    yield schemathesis.openapi.from_wsgi("/api/schema/", application, headers=signed_in)
    KNOWN_IDS.clear()


schema = schemathesis.pytest.from_fixture("api_schema")


# Also in the PostgreSQL pass: it refuses what SQLite lets through (NUL characters).
@pytest.mark.postgres
@pytest.mark.slow  # property-based: every operation, 60 generated requests each
@schema.parametrize()
@hypothesis.settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
def test_it_answers_generated_requests_within_its_schema(case: OpenApiCase, admin_user: User) -> None:
    token = ApiToken.issue(admin_user)[1]
    case.call_and_validate(
        headers={"Authorization": f"Token {token}"},
        checks=[
            checks.not_a_server_error,
            checks.status_code_conformance,
            checks.content_type_conformance,
            checks.response_headers_conformance,
            checks.response_schema_conformance,
            checks.negative_data_rejection,
        ],
    )
