"""The ways a notification leaves Harness, behind one interface: a channel says
which events it cares about, records what it will send in the event's transaction
(so nothing is lost to a crash between the two) and hands each row to a worker.
Webhooks (signed JSON or Slack-format, per endpoint) and email are the two here; a
next channel is one more class in CHANNELS, the callers do not change."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from approvals.models import ApprovalRequest
from core import events as ev
from notifications import mail, messages, services
from runs.models import Event

# A decision the requester hears of: a grant only once the quorum is met.
FINAL_DECISIONS = ("granted", "denied", "changes_requested")


class Interest(Enum):
    YES = "yes"
    NO = "no"
    # No event of this one's type ever calls for something sent: the listener
    # (notifications.signals) asks the channel no more about the type.
    NEVER = "never"


class Channel(Protocol):
    name: str

    def interest(self, event: ev.AnyEvent) -> Interest:
        """Whether ``event`` may call for something sent (cheap: most do not)."""

    def record(self, row: Event, event: ev.AnyEvent) -> list[str]:
        """The rows to send for ``event`` (in its transaction); their ids."""

    def enqueue(self, row_id: str) -> None:
        """Hand a row to a worker (after the commit); a lost message is swept up later."""


class Webhooks:
    """Each active endpoint of the run's project (or site-wide) that wants the kind;
    the endpoint's format (JSON signed, or Slack's) renders the body."""

    name = "webhooks"

    def interest(self, event: ev.AnyEvent) -> Interest:
        if messages.kind_of(event) is not None:
            return Interest.YES
        # kind_of has just told of the event's type whether it ever notifies.
        return Interest.NEVER if type(event) in messages.SILENT else Interest.NO

    def record(self, row: Event, event: ev.AnyEvent) -> list[str]:
        return services.record_deliveries(row)

    def enqueue(self, row_id: str) -> None:
        from notifications.tasks import enqueue

        enqueue(row_id)


class Email:
    """Reviewers hear of a request filed; the requester of its outcome (notifications.mail)."""

    name = "email"

    def interest(self, event: ev.AnyEvent) -> Interest:
        match event:
            case ev.ApprovalRequired():
                return Interest.YES
            case ev.ApprovalDecided():
                final = event.decision != "granted" or event.grants >= event.needed
                return Interest.YES if final else Interest.NO
            case ev.ApprovalLapsed():
                return Interest.YES if event.status in ("expired", "cancelled") else Interest.NO
            case _:
                # The cases above test the type alone.
                return Interest.NEVER

    def record(self, row: Event, event: ev.AnyEvent) -> list[str]:
        if not isinstance(event, ev.ApprovalRequired | ev.ApprovalDecided | ev.ApprovalLapsed):
            return []
        request = ApprovalRequest.objects.select_related("run", "run__created_by").filter(pk=event.request_id).first()
        if request is None:
            return []
        if isinstance(event, ev.ApprovalRequired):
            return mail.record_requested(request)
        return mail.record_outcome(request, event.decision if isinstance(event, ev.ApprovalDecided) else event.status)

    def enqueue(self, row_id: str) -> None:
        from notifications.tasks import enqueue_mail

        enqueue_mail(row_id)


CHANNELS: list[Channel] = [Webhooks(), Email()]
