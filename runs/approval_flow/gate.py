"""The loop's approval gate (core.ports.ApprovalGate) over ApprovalRequest rows, built
for each run by the composition root (runs.runtime): it files the run's requests and
uses, lapses and cancels them through runs.approval_flow.flow."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from django.utils import timezone

from approvals.models import ApprovalRequest
from core.fences import driver_fence
from core.ports import ApprovalAsk, Filed, RequestState
from runs.approval_flow.flow import cancel_open_requests, do_consume, do_lapse
from runs.models import Run

Status = ApprovalRequest.Status


class DjangoApprovals:
    """What it writes into the run's log (a lapse, a cancellation) is the driver's,
    fenced by its lease; the run's starter is the requester."""

    def __init__(self, run: Run, lease_token: int | None = None) -> None:
        self.run = run
        self.fence = driver_fence(lease_token)

    def request(self, ask: ApprovalAsk) -> Filed:
        now = timezone.now()
        # After a crash between filing and the run's checkpoint, the same call finds
        # the request it already filed instead of filing a second one.
        pending = ApprovalRequest.objects.filter(run_id=ask.run_id, key=ask.key, status=Status.PENDING, expires_at__gt=now).first()
        if pending is not None:
            return Filed(str(pending.pk), new=False)
        request = ApprovalRequest.objects.create(
            run_id=ask.run_id,
            call_id=ask.call_id,
            tool=ask.tool,
            args=dict(ask.args),
            revision=ask.revision,
            policy_version=ask.policy_version,
            key=ask.key,
            rule=ask.rule,
            diff=ask.diff or "",
            sources=dict(ask.sources),
            effect=dict(ask.effect) if ask.effect is not None else None,
            evidence=[dict(e) for e in ask.evidence],
            requested_by=self.run.created_by,
            needed=ask.reviewers.count,
            eligible_users=list(ask.reviewers.users),
            eligible_groups=list(ask.reviewers.groups),
            expires_at=now + timedelta(seconds=ask.expires_in_seconds),
        )
        return Filed(str(request.pk), new=True)

    def state(self, request_id: str) -> RequestState:
        row = ApprovalRequest.objects.select_related("decided_by").get(pk=request_id)
        by = row.decided_by.get_username() if row.decided_by is not None else ""
        return RequestState(str(row.pk), row.status, row.reason, row.consumed_by_call, row.expiry_due(), by)

    def consume(self, request_id: str, call_id: str) -> bool:
        return do_consume(request_id, call_id)

    def lapse(self, request_id: str, status: Literal["expired", "stale"], reason: str) -> bool:
        return do_lapse(ApprovalRequest.objects.get(pk=request_id), status, reason, fence=self.fence)

    def cancel_open(self, run_id: str, reason: str) -> list[str]:
        return cancel_open_requests(run_id, reason, fence=self.fence)
