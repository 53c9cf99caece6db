from runs.models.agent_token import AgentToken
from runs.models.artifact import Artifact, ArtifactChunk, PublishedPatch, RunArtifact
from runs.models.event import Event
from runs.models.evidence import Evidence
from runs.models.host import WorkerHost
from runs.models.receipt import Receipt
from runs.models.report import Report
from runs.models.run import Run
from runs.models.switch import GlobalSwitch

__all__ = [
    "AgentToken",
    "Artifact",
    "ArtifactChunk",
    "Event",
    "Evidence",
    "GlobalSwitch",
    "PublishedPatch",
    "Receipt",
    "Report",
    "Run",
    "RunArtifact",
    "WorkerHost",
]
