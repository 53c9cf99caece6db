"""Loading a project's policy. The project's newest PolicyVersion is current; a
project without any gets version 1 from ``default_policy.json``."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from approvals.models import PolicyVersion
from common.cursors import checkpoint_cursor
from core.policy import Policy, check_policy
from projects.models import default_project_id

DEFAULT_POLICY_FILE = Path(__file__).with_name("default_policy.json")


def default_policy_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DEFAULT_POLICY_FILE.read_text())
    return document


def load_policy(row: PolicyVersion) -> Policy:
    return check_policy({**row.document, "version": row.version})


SELF_APPROVAL_NOT_PERMITTED = (
    "self-approval is not permitted on this deployment: whoever runs it turns it on "
    "with HARNESS_ALLOW_SELF_APPROVAL=1 in the server's environment (docs/deploy.md)"
)


def self_approval_on(policy: Policy) -> bool:
    """Whether the run's starter may decide its requests: only where the deployment
    permits it (HARNESS_ALLOW_SELF_APPROVAL) and the policy turns it on, so no one
    admin alone can take the second person out."""
    return policy.allow_self_approval and settings.HARNESS_ALLOW_SELF_APPROVAL


def current_policy_row(project_id: int | None = None) -> PolicyVersion:
    """The policy in force in the project (``project_id``, else the default project):
    its newest version, or, for a project with none yet, version 1 made from the
    default document."""
    project_id = default_project_id() if project_id is None else project_id
    row = PolicyVersion.objects.filter(project_id=project_id).order_by("-version").first()
    if row is not None:
        return row
    document = default_policy_document()
    try:
        # Two processes may seed at once; the version unique in its project makes one of them lose.
        with transaction.atomic():
            return PolicyVersion.objects.create(
                project_id=project_id, version=document["version"], document=document, note="default policy"
            )
    except IntegrityError:
        return PolicyVersion.objects.get(project_id=project_id, version=document["version"])


def newest_version(project_id: int) -> int | None:
    """The number of the project's policy in force, None before it has one (read
    without seeding, for a loop that asks before every proposal): one statement, its
    text made once, through the hot path's cursor (common.cursors). The ORM made the
    same query anew before every proposal, most of the look's CPU."""
    with checkpoint_cursor(connection) as cursor:
        cursor.execute(_newest_statement(), [project_id])
        found = cursor.fetchone()
    return None if found is None else int(found[0])


@functools.cache
def _newest_statement() -> str:
    quote = connection.ops.quote_name
    table = quote(PolicyVersion._meta.db_table)
    # Only the model's quoted names are spliced in; the project is a parameter.
    return f"SELECT {quote('version')} FROM {table} WHERE {quote('project_id')} = %s ORDER BY {quote('version')} DESC LIMIT 1"  # noqa: S608
