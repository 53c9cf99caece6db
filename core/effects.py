"""The effect of an external call, fixed when it is asked for (docs/design.md,
Approvals): everything a publish or a change request will do, computed once by the
process that files the request, stored with the call and the request, shown to the
reviewer, bound into the approval key, and performed exactly so by whichever process
performs it. Nothing in it is read again from that process's settings.

- ``outbox``: one patch file of a known name and digest in the server's outbox.
- ``push``: one commit, every byte of it fixed (tree, parent, author, committer and
  their dates, message), pushed to one branch of one remote.
- ``change_request``: a pull or merge request on one forge project, from one branch
  into another, with this title and body.
- ``mcp``: one call of one tool, at one version, on one MCP server, with these
  arguments (the idempotency key among them when the server takes one).
- ``refused``: the call would be refused (nothing to publish, no forge); performing
  it refuses with the same reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, TypeAdapter, model_serializer

from core.jsonutil import JSON


class _Effect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Publication(_Effect):
    # The secret scan's findings the reviewer was shown, as file#fingerprint
    # (common.secret_scan): bound into the approval with the rest of the effect, so
    # the scan again before the push refuses any finding that is not among them.
    # Left out of the record when there are none, so an effect without findings
    # is recorded, and keyed, as it always was.
    secrets: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _without_no_secrets(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        if not data.get("secrets"):
            data.pop("secrets", None)
        return data


class Identity(_Effect):
    name: str
    email: str
    # Seconds since the epoch, UTC: part of the commit's bytes, so part of its id.
    date: int

    def line(self) -> str:
        return f"{self.name} <{self.email}>"


class OutboxEffect(_Publication):
    kind: Literal["outbox"] = "outbox"
    file: str
    revision: str
    message: str
    sha256: str  # of the file's bytes
    bytes: int


class PushEffect(_Publication):
    kind: Literal["push"] = "push"
    remote: str
    branch: str
    base: str  # the parent commit
    tree: str
    author: Identity
    committer: Identity
    message: str  # the whole commit message, Harness's trailers included
    commit: str  # the id of exactly that commit


class ChangeRequestEffect(_Effect):
    kind: Literal["change_request"] = "change_request"
    forge: Literal["github", "gitlab"]
    web_url: str
    project: str
    source: str
    # None: the forge could not be asked for its default branch when this was filed;
    # the request opens into the project's default branch as the forge has it then.
    target: str | None
    title: str
    body: str


class McpEffect(_Effect):
    kind: Literal["mcp"] = "mcp"
    server: str
    endpoint: str  # where the server is reached (its URL), never its credentials
    tool: str  # the tool's own name on the server
    version: str  # core.mcp.tool_version: a changed schema is another effect
    arguments: dict[str, JSON]  # exactly what is sent, the idempotency key included
    key_arg: str | None = None


class RefusedEffect(_Effect):
    kind: Literal["refused"] = "refused"
    reason: str


AnyEffect = Annotated[OutboxEffect | PushEffect | ChangeRequestEffect | McpEffect | RefusedEffect, Field(discriminator="kind")]
_EFFECT: TypeAdapter[AnyEffect] = TypeAdapter(AnyEffect)


def parse_effect(data: object) -> AnyEffect:
    return _EFFECT.validate_python(data)


@dataclass(frozen=True)
class Plan:
    """What a workspace fixes for an external call: the effect, and the text a
    reviewer reads of it (the diff with its header), made from the effect alone."""

    effect: dict[str, JSON]
    shown: str
    # The secret scan of the change shown (common.secret_scan): file, line, kind and
    # fingerprint of each finding, for the gate to decide on (core.publish_gate).
    findings: tuple[dict[str, JSON], ...] = ()


def summary(effect: AnyEffect) -> str:
    """What granting does, in words that match where the effect goes."""
    once = "it happens once and cannot be taken back by the run."
    if isinstance(effect, OutboxEffect):
        return (
            f"Writes the workspace's changes against the base revision, exactly the diff shown, as one patch file"
            f" ({effect.file}, {effect.bytes} bytes) with this message into the server's outbox, outside the sandbox; {once}"
        )
    if isinstance(effect, PushEffect):
        return (
            f"Pushes one commit, {effect.commit[:12]}, to branch {effect.branch} on {effect.remote}: the diff shown on"
            f" {effect.base[:12]}, with exactly the message shown, by {effect.author.line()}; {once}"
        )
    if isinstance(effect, ChangeRequestEffect):
        noun = "pull request" if effect.forge == "github" else "merge request"
        into = effect.target or "the project's default branch"
        return (
            f"Opens a {noun} on {effect.web_url}/{effect.project} from branch {effect.source} into {into}, with the"
            f" title and body shown, under the server's forge account; others see it at once, and the run cannot take it back."
        )
    if isinstance(effect, McpEffect):
        key = f" (idempotency key in {effect.key_arg})" if effect.key_arg else " (the server takes no idempotency key)"
        return (
            f"Calls tool {effect.tool}, version {effect.version}, on MCP server {effect.server} ({effect.endpoint}) with exactly"
            f" the arguments shown{key}; the server acts outside the sandbox under the server's credentials, and the run"
            f" cannot take it back."
        )
    return f"Nothing: this call would be refused ({effect.reason})."


def shown_line(text: str) -> str:
    """One line of text for a reviewer's header: any character that could break the
    line or hide text is shown escaped, never as itself."""
    return "".join(c if c == "\t" or (c.isprintable() and c not in "\u2028\u2029") else c.encode("unicode_escape").decode() for c in text)
