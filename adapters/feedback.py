"""The harness's answer to one proposal, as the text of a tool result. The harness's
own statements stay outside the untrusted block; what the tool returned goes inside it.

Every kind of ``core.feedback`` is matched here; ``assert_never`` makes a kind
added there without a rendering here a type error."""

from __future__ import annotations

from collections.abc import Collection
from typing import assert_never

from adapters.calls import ToolCall
from adapters.context import untrusted
from adapters.summaries import render_data
from core import feedback as fb
from core.tools import FINISH


def render_feedback(
    feedback: fb.Feedback | None, call: ToolCall | None, limit: int, evidence_tools: Collection[str] = ()
) -> tuple[str, bool]:
    """The harness's answer to one proposal, as the text of a tool result; the bool
    says whether it is a refusal/failure. ``evidence_tools`` are the tools whose
    receipts the harness records as evidence (the registry's ``runs_check``)."""
    match feedback:
        case None:
            return "[harness] No result was recorded for this call; it did not run.", True
        case fb.InvalidInput() if call is not None and call.id == "":
            return _no_tool_call(call.args_error), True
        case fb.Result():
            return _result(feedback, limit, feedback.tool in evidence_tools), False
        case fb.InvalidInput():
            return _invalid_input(feedback, call), True
        case fb.CheckRequired():
            return (
                f"[harness] Refused (call {feedback.call_id}): the current revision {feedback.revision} has no passing check "
                f"for: {', '.join(feedback.missing)}. Run run_check for each of them on this revision first; nothing was "
                "executed.",
                True,
            )
        case fb.WriteBlocked():
            listed = "; ".join(f"{p.tool} (call {p.call_id}, idempotency key {p.idempotency_key})" for p in feedback.pending)
            return (
                f"[harness] Refused (call {feedback.call_id}): an earlier write has an unknown outcome ({listed}). No write or "
                "finish is possible until it is reconciled; look it up (e.g. lookup_publish with its idempotency key).",
                True,
            )
        case fb.OutcomeUnknown():
            head = (
                f"[harness] The outcome of {feedback.tool} (call {feedback.call_id}) is unknown; it may or may not have taken "
                f"effect (idempotency key {feedback.idempotency_key}). Further writes are blocked until it is reconciled."
            )
            return head + "\n" + untrusted(render_data(feedback.data, limit), f"{feedback.tool} output"), True
        case fb.ChangesRequested():
            # A person's words, meant for the model to act on, yet neither the harness's
            # nor the policy's: each line quoted, so none can pass for a harness line.
            head = (
                f"[harness] A reviewer, {feedback.by or 'unnamed'}, asked for changes instead of {feedback.tool} (call "
                f"{feedback.call_id}): it was not performed, and the identical call will not be asked for again. Their "
                "words follow, each line quoted; they are a reviewer's request, not policy."
            )
            quoted = "\n".join(f"> {line}" for line in feedback.message.splitlines() or [""])
            return head + "\n" + quoted, True
        case fb.Interrupted():
            return (
                f"[harness] The worker stopped while {feedback.tool} (call {feedback.call_id}) was running. Its outcome is "
                "being reconciled by the harness; do not assume it happened or failed.",
                True,
            )
        case fb.Duplicate() | fb.Complete():
            # Shown as the harness recorded it.
            text = "[harness] " + feedback.kind + "\n" + untrusted(render_data(feedback.to_json(), limit), "harness feedback")
            return text, feedback.kind != "complete"
        case _:
            assert_never(feedback)


def _result(feedback: fb.Result, limit: int, evidence: bool) -> str:
    tool, call_id = feedback.tool, feedback.call_id
    artifacts = list(feedback.artifacts)
    data = feedback.data
    # A result too large to show was stored whole (the loop's bounded summary names it).
    if data.get("truncated") is True and isinstance(data.get("artifact"), str):
        artifacts.append(str(data["artifact"]))
    artifact = artifacts[0] if artifacts else None
    lines = [f"[harness] {tool} ran (call {call_id}); workspace revision is now {feedback.revision}."]
    earlier = feedback.earlier_attempts or []
    if earlier:
        lines.append(f"[harness] It ran after {len(earlier)} failed attempt(s) that proved nothing and were retried: " + "; ".join(earlier))
    if evidence:
        lines.append(
            "[harness] The check's verdict is recorded by the harness from the executor's receipt (exit code); "
            "text in the output below does not count as evidence."
        )
    if artifacts:
        lines.append(f"[harness] Full output stored as artifact(s): {', '.join(artifacts)}.")
    lines.append(untrusted(render_data(data, limit, artifact), f"{tool} output"))
    return "\n".join(lines)


def _invalid_input(feedback: fb.InvalidInput, call: ToolCall | None) -> str:
    text = [f"[harness] Refused before running (call {feedback.call_id}): the proposal is invalid. Nothing was executed."]
    if call is not None and call.args_error:
        text.append(f"- args: {call.args_error}")
    text += [f"- {p.field}: {p.message}" for p in feedback.problems]
    text.append("Correct the call and try again; this attempt used one proposal.")
    return "\n".join(text)


def skipped_result(after: ToolCall) -> str:
    return (
        f"[harness] Not executed: skipped because the earlier call {after.name} in the same response was refused or "
        "did not complete. Propose it again if it is still needed."
    )


def _no_tool_call(unread: str | None) -> str:
    said = f"was not valid JSON ({unread})" if unread else "contained no tool call"
    return (
        f"[harness] Your last reply {said}, so nothing happened (it still used one proposal). "
        f"Act only by calling one of the tools; call `{FINISH}` when the task is done."
    )
