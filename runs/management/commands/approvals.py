"""List, grant and deny approval requests from a shell."""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any, NoReturn

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest
from runs.approval_flow.flow import deny, grant, staleness_now


def describe(request: ApprovalRequest) -> dict[str, Any]:
    stale = staleness_now(request) if request.status == ApprovalRequest.Status.PENDING else None
    return {
        "id": str(request.pk),
        "run_id": str(request.run_id),
        "call_id": request.call_id,
        "tool": request.tool,
        "args": request.args,
        "revision": request.revision,
        "policy_version": request.policy_version,
        "rule": request.rule,
        "status": request.status,
        "stale": stale,
        "expires_at": request.expires_at.isoformat(),
        "expires_in_seconds": max(0, int((request.expires_at - timezone.now()).total_seconds())),
        "diff": request.diff,
        "effect": request.effect,
        "decided_by": request.decided_by.get_username() if request.decided_by else None,
        "reason": request.reason,
    }


class Command(BaseCommand):
    help = "Approval requests: list, grant ID --user U, deny ID --user U --reason R"

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list")
        listing.add_argument("--run")
        listing.add_argument("--all", action="store_true", help="include decided requests")
        listing.add_argument("--json", action="store_true")
        granting = sub.add_parser("grant")
        granting.add_argument("id")
        granting.add_argument("--user", required=True)
        denying = sub.add_parser("deny")
        denying.add_argument("id")
        denying.add_argument("--user", required=True)
        denying.add_argument("--reason", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            return self.list(options)
        request = self.request(options["id"])
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            self.fail(f"no user named {options['user']!r}")
        try:
            if options["action"] == "grant":
                grant(request, user)
            else:
                deny(request, user, options["reason"])
        except DecisionRefused as exc:
            self.fail(f"refused: {exc}")
        request.refresh_from_db()
        self.stdout.write(f"{request.status}: {request.tool} for run {request.run_id}")

    def list(self, options: dict[str, Any]) -> None:
        requests = ApprovalRequest.objects.select_related("decided_by").order_by("created_at")
        if not options["all"]:
            requests = requests.filter(status=ApprovalRequest.Status.PENDING)
        if options["run"]:
            requests = requests.filter(run_id=self.uuid(options["run"]))
        rows = [describe(r) for r in requests]
        if options["json"]:
            self.stdout.write(json.dumps(rows))
            return
        for row in rows:
            stale = f" STALE ({row['stale']})" if row["stale"] else ""
            self.stdout.write(
                f"{row['id']}  {row['status']:8}  {row['tool']:12} run {row['run_id']}  expires in {row['expires_in_seconds']}s{stale}"
            )
        if not rows:
            self.stdout.write("no approval requests")

    def request(self, value: str) -> ApprovalRequest:
        request = ApprovalRequest.objects.filter(pk=self.uuid(value)).first()
        if request is None:
            self.fail(f"no approval request with id {value!r}")
        return request

    def uuid(self, value: str) -> str:
        try:
            return str(uuid.UUID(value))
        except ValueError:
            self.fail(f"{value!r} is not an id")

    def fail(self, message: str) -> NoReturn:
        self.stderr.write(message)
        sys.exit(2)
