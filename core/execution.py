"""Gates 8-10 (execute, receipt check, observe) for a call the loop admitted: its
attempts, each receipt checked and recorded, and the evidence a check leaves. The
call's record is the ledger's, which each attempt's events change (core.fold_calls:
the receipt that settles the call says what the proposer is shown). ``execute``
returns the stop a limit or an invalid receipt decides, if one does."""

from __future__ import annotations

from pydantic import ValidationError

from core import events as ev
from core import storable
from core.call_record import CallRecord
from core.context import RunContext, guard, no_retry
from core.decisions import Stop
from core.gates import Gates
from core.jsonutil import JSON, canonical_json
from core.pending import record_pending
from core.policy import CheckDef
from core.ports import Call, RevisionMismatch
from core.receipts import Receipt, ReceiptInvalid, check_receipt
from core.recording import checkpoint, clear_evidence, emit
from core.state import RunState
from core.tools import ToolSpec


def attempts_left(state: RunState, record: CallRecord) -> bool:
    return record.attempts < state.limits.max_attempts


def infrastructure_failure(receipt: Receipt) -> str | None:
    return receipt.infrastructure


def receipt_check(raw: object, record: CallRecord, spec: ToolSpec, harness_revision: str) -> Receipt:
    return check_receipt(raw, record.call_id, spec.name, harness_revision)


def execute(run: RunContext, gates: Gates, record: CallRecord, spec: ToolSpec) -> Stop | None:
    """Attempt the call until a receipt that is not transient."""
    check = run.policy.check(str(record.args[spec.runs_check])) if spec.runs_check is not None else None
    while True:
        refused = _start_attempt(run, gates, record, spec)
        if refused is not None:
            return refused
        raw, problem_detail = _attempt(run, record, spec, check)
        before = run.state.revision
        checked = _checked_receipt(run, gates, raw, problem_detail, record, spec)
        if isinstance(checked, Stop):
            return checked
        if checked.status != "transient":
            _settle(run, record, spec, checked, check, before)
            return None
        no_retry_left = _before_retry(run, gates, record, checked)
        if no_retry_left is not None:
            return no_retry_left


def _start_attempt(run: RunContext, gates: Gates, record: CallRecord, spec: ToolSpec) -> Stop | None:
    state = run.state
    guard(run, "before an attempt")
    if not gates.attempts_left(state, record):
        return Stop("attempt_limit", f"{record.call_id} used its {state.limits.max_attempts} attempts")
    if state.calls >= state.limits.max_tool_calls:
        return Stop("budget_exhausted", f"call budget of {state.limits.max_tool_calls} used")
    emit(run, ev.CallStarted, call_id=record.call_id, tool=spec.name, attempt=record.attempts + 1, idempotency_key=record.idempotency_key)
    # Write intent is durable before the effect can happen, so a crash during
    # the call is found as "started" and reconciled instead of forgotten. A
    # read needs no such record: after a crash it is simply done again.
    if spec.has_effect or spec.runs_untrusted_code:
        checkpoint(run)
    return None


def _attempt(run: RunContext, record: CallRecord, spec: ToolSpec, check: CheckDef | None) -> tuple[object, str]:
    """What the executor returned (None if it raised) and, if it raised, why."""
    state = run.state
    call = Call(
        run_id=state.run_id,
        call_id=record.call_id,
        tool=spec.name,
        tool_version=spec.version,
        args=record.args,
        attempt=record.attempts,
        idempotency_key=record.idempotency_key,
        max_output_bytes=state.limits.max_output_bytes_per_call,
        check=check,
        deadline=state.deadline,
        effect=record.effect,
    )
    try:
        return run.executor.execute(call), ""
    except RevisionMismatch:
        raise
    except Exception as exc:  # noqa: BLE001 - an executor crash is a missing receipt, not a worker crash
        return None, f"executor raised {type(exc).__name__}: {exc}"


def _checked_receipt(run: RunContext, gates: Gates, raw: object, problem_detail: str, record: CallRecord, spec: ToolSpec) -> Receipt | Stop:
    """Gate 9, receipt check: the receipt checked against the revision the harness reads
    itself, on the record either way (its data as the proposer sees it); an invalid
    one stops the run."""
    harness_revision = run.workspace.revision() if spec.may_change_workspace else run.state.revision
    kept: JSON = None
    try:
        # Tool output is data: a NUL or a name that is not UTF-8 in it is shown
        # escaped, so the receipt can be stored (core.storable). What escaping
        # cannot mend (nested too deep, not JSON) makes the receipt invalid; of an
        # invalid receipt above the output cap, only its summary is kept.
        kept = storable.escaped(raw, "receipt")
        receipt = gates.receipt(kept, record, spec, harness_revision)
    except (ReceiptInvalid, storable.Unstorable) as exc:
        problem = f"{exc} ({problem_detail})" if problem_detail else str(exc)
        if isinstance(exc, storable.Unstorable):
            problem = f"the receipt cannot be stored: {exc}"
        found = storable.summary(raw)
        if isinstance(exc, storable.Unstorable) or found.bytes > run.state.limits.max_output_bytes_per_call:
            kept = {"summary": found.model_dump()}
        before = run.state.revision
        _record_receipt(run, record, spec, harness_revision, kept, problem=problem)
        if spec.has_effect:
            record_pending(run, record, spec, f"receipt invalid: {problem}")
        clear_evidence(run, before, harness_revision, by_write=spec.writes_workspace)
        return Stop("receipt_invalid", problem)
    # Stored as the proposer sees it: data above the run's output cap is kept as
    # its head and the artifact holding the whole (observe), not twice in full
    # (event and receipt row).
    observed = observe(run, receipt.data)
    # Its fields as they are: none holds a model, and a dump, which would only copy
    # them, is some 13,000 instructions (dict(receipt), through pydantic's __getattr__
    # for "keys", some 40,000).
    _record_receipt(run, record, spec, harness_revision, {**vars(receipt), "data": observed}, checked=receipt)
    return receipt


def _record_receipt(
    run: RunContext,
    record: CallRecord,
    spec: ToolSpec,
    harness_revision: str,
    kept: JSON,
    *,
    checked: Receipt | None = None,
    problem: str | None = None,
) -> None:
    """The attempt's receipt on the record, as ``kept``: valid when it passed the check
    (``checked``), and then what it wrote and whether it applied an external effect;
    otherwise invalid for ``problem``, having settled neither."""
    assert (checked is None) != (problem is None)
    emit(
        run,
        ev.ReceiptRecorded,
        call_id=record.call_id,
        tool=spec.name,
        attempt=record.attempts,
        valid=checked is not None,
        problem=problem,
        receipt=kept,
        harness_revision=harness_revision,
        wrote=spec.written_paths(record.args) if checked is not None and _wrote(spec, checked) else [],
        external=checked is not None
        and spec.external_effect
        and checked.status not in ("transient", "unknown")
        and checked.effect == "applied",
    )


def _wrote(spec: ToolSpec, receipt: Receipt) -> bool:
    """The receipt says the call wrote the workspace (an unknown outcome is a pending effect)."""
    return spec.writes_workspace and receipt.status not in ("transient", "unknown") and receipt.effect != "none"


def _before_retry(run: RunContext, gates: Gates, record: CallRecord, receipt: Receipt) -> Stop | None:
    """After a transient failure: the stop if no retry is possible, else wait the backoff."""
    state = run.state
    infrastructure = gates.infrastructure_failure(receipt)
    error = receipt.data.get("error")
    guard(run, "once the call had run and its receipt was recorded", infrastructure)
    if infrastructure is not None and receipt.infrastructure_lasting:
        return Stop("sandbox_unavailable", f"the sandbox cannot run {record.call_id}: {infrastructure}; retrying would fail the same way")
    backoff = min(run.config.retry_base_seconds * 2 ** (record.attempts - 1), run.config.retry_max_seconds)
    if not gates.attempts_left(state, record):
        return no_retry("attempt_limit", f"{record.call_id} failed transiently {record.attempts} times", infrastructure)
    if run.clock.now() + backoff >= state.deadline:
        return no_retry("deadline", f"a retry after {backoff:.2f}s backoff would cross the deadline", infrastructure)
    reason = f"the sandbox failed, not the call (no effect): {infrastructure}" if infrastructure else "transient failure, no effect"
    # What failed is what the result tells the model once an attempt gets through.
    failed = infrastructure or (error if isinstance(error, str) else "transient failure")
    emit(run, ev.Retry, call_id=record.call_id, attempt=record.attempts, backoff_seconds=backoff, reason=reason, transient_reason=failed)
    checkpoint(run)
    run.clock.sleep(backoff)
    return None


def _settle(run: RunContext, record: CallRecord, spec: ToolSpec, receipt: Receipt, check: CheckDef | None, before: str) -> None:
    """What the call's receipt (on the record, ``before`` the revision it found) leaves
    besides: a pending effect, evidence no longer current, the check's evidence."""
    if receipt.status == "unknown":
        if spec.has_effect:
            record_pending(run, record, spec, "the executor could not tell whether the effect happened")
        clear_evidence(run, before, receipt.revision, by_write=spec.writes_workspace)
        return
    clear_evidence(run, before, receipt.revision, by_write=_wrote(spec, receipt))
    if check is not None:
        _record_evidence(run, record, receipt, check)


def observe(run: RunContext, data: dict[str, JSON]) -> dict[str, JSON]:
    """Gate 10, observe: what the proposer sees: the data, or a bounded summary plus an artifact ref."""
    text = canonical_json(data)
    cap = run.state.limits.max_output_bytes_per_call
    encoded = text.encode("utf-8")
    if len(encoded) <= cap:
        return data
    ref = run.artifacts.put(encoded, "application/json")
    head = encoded[: min(cap, 4000)].decode("utf-8", errors="ignore")
    return {"truncated": True, "size": len(encoded), "artifact": ref, "head": head}


def _record_evidence(run: RunContext, record: CallRecord, receipt: Receipt, check: CheckDef) -> None:
    state = run.state
    data = receipt.data
    exit_code = data.get("exit_code")
    exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
    timed_out = data.get("timed_out") is True
    before = record.revision_before or state.revision
    emit(
        run,
        ev.EvidenceRecorded,
        call_id=record.call_id,
        check_id=check.check_id,
        check_version=check.version,
        passed=exit_code == 0 and not timed_out,
        exit_code=exit_code,
        revision=before,
        # Evidence is current only if the check left the revision it checked intact.
        current=before == state.revision,
        command=list(check.command),
        timed_out=timed_out,
        duration_ms=_int(data.get("duration_ms")),
        image_digest=str(data.get("image_digest", "")),
        policy_version=state.policy_version,
        output_ref=_str_or_none(data.get("output_ref")),
        egress=_egress(data.get("egress")),
    )


def _egress(value: object) -> list[ev.EgressSummary]:
    """The receipt's account of where the check connected, as the evidence keeps it
    (a receipt that has none, or a malformed one, gives none)."""
    if not isinstance(value, list):
        return []
    try:
        return [ev.EgressSummary.model_validate(item) for item in value]
    except ValidationError:
        return []


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
