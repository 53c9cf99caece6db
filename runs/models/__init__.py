from runs.models.artifact import Artifact, RunArtifact
from runs.models.effects import PendingEffect
from runs.models.event import Event
from runs.models.evidence import Evidence
from runs.models.ledger import CallLedgerEntry, Receipt
from runs.models.report import Report
from runs.models.run import Run
from runs.models.switch import GlobalSwitch

__all__ = ["Artifact", "CallLedgerEntry", "Event", "Evidence", "GlobalSwitch", "PendingEffect", "Receipt", "Report", "Run", "RunArtifact"]
