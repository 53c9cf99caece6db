"""Gates 8-10 (execute, receipt check, observe), the evidence a check leaves, and the
effects of unknown outcome: recorded, reconciled, and recovered after a crash."""

from __future__ import annotations

from core import events as ev
from core import feedback as fb
from core import storable
from core.driver import Driver, Stop, no_retry
from core.jsonutil import JSON, canonical_json
from core.policy import CheckDef
from core.ports import Call, RevisionMismatch
from core.receipts import Receipt, ReceiptInvalid
from core.state import CallRecord, EvidenceRecord, Operation, PendingEffect
from core.tools import ToolSpec


class Execution(Driver):
    # -- gates 8-10: execute, receipt check, observe ----------------------------

    def _execute(self, record: CallRecord, spec: ToolSpec) -> None:
        check = self.policy.check(str(record.args[spec.runs_check])) if spec.runs_check is not None else None
        if spec.external_effect:
            self._record_operation(record, spec)
        while True:
            self._start_attempt(record, spec)
            raw, problem_detail = self._attempt(record, spec, check)
            receipt, observed = self._checked_receipt(raw, problem_detail, record, spec)
            record.last_status = receipt.status
            if receipt.status != "transient":
                feedback = self._settle(record, spec, receipt, observed, check)
                self._settle_operation(record, receipt, feedback)
                self._guard("after the receipt")
                return self._end_step(feedback)
            self._before_retry(record, receipt)

    def _record_operation(self, record: CallRecord, spec: ToolSpec) -> None:
        """Part of the intent checkpointed before the attempt: a crash during the call
        leaves the operation known, so the same effect is never performed twice."""
        assert record.idempotency_key is not None
        state = self.state
        state.operations[record.idempotency_key] = Operation(
            key=record.idempotency_key, tool=spec.name, args=record.args, revision=state.revision, call_id=record.call_id
        )

    def _start_attempt(self, record: CallRecord, spec: ToolSpec) -> None:
        state = self.state
        self._guard("before an attempt")
        if not self._attempts_left(record):
            raise Stop("attempt_limit", f"{record.call_id} used its {state.limits.max_attempts} attempts")
        if state.calls >= state.limits.max_tool_calls:
            raise Stop("budget_exhausted", f"call budget of {state.limits.max_tool_calls} used")
        record.attempts += 1
        state.calls += 1
        record.state = "started"
        record.revision_before = state.revision
        self._emit(ev.CallStarted, call_id=record.call_id, tool=spec.name, attempt=record.attempts, idempotency_key=record.idempotency_key)
        # Write intent is durable before the effect can happen, so a crash during
        # the call is found as "started" and reconciled instead of forgotten. A
        # read needs no such record: after a crash it is simply done again.
        if spec.has_effect or spec.runs_untrusted_code:
            self._checkpoint()

    def _attempt(self, record: CallRecord, spec: ToolSpec, check: CheckDef | None) -> tuple[object, str]:
        """What the executor returned (None if it raised) and, if it raised, why."""
        state = self.state
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
            return self.executor.execute(call), ""
        except RevisionMismatch:
            raise
        except Exception as exc:  # noqa: BLE001 - an executor crash is a missing receipt, not a worker crash
            return None, f"executor raised {type(exc).__name__}: {exc}"

    def _checked_receipt(self, raw: object, problem_detail: str, record: CallRecord, spec: ToolSpec) -> tuple[Receipt, dict[str, JSON]]:
        """The receipt checked against the revision the harness reads itself, on the
        record either way, and its data as the proposer sees it; an invalid one stops
        the run."""
        harness_revision = self.workspace.revision() if spec.may_change_workspace else self.state.revision
        kept: JSON = None
        try:
            # Tool output is data: a NUL or a name that is not UTF-8 in it is shown
            # escaped, so the receipt can be stored (core.storable). What escaping
            # cannot mend (nested too deep, not JSON) makes the receipt invalid; of an
            # invalid receipt above the output cap, only its summary is kept.
            kept = storable.escaped(raw, "receipt")
            receipt = self._check_receipt(kept, record, spec, harness_revision)
        except (ReceiptInvalid, storable.Unstorable) as exc:
            problem = f"{exc} ({problem_detail})" if problem_detail else str(exc)
            if isinstance(exc, storable.Unstorable):
                problem = f"the receipt cannot be stored: {exc}"
            found = storable.summary(raw)
            if isinstance(exc, storable.Unstorable) or found.bytes > self.state.limits.max_output_bytes_per_call:
                kept = {"summary": found.model_dump()}
            self._emit(
                ev.ReceiptRecorded,
                call_id=record.call_id,
                tool=spec.name,
                attempt=record.attempts,
                valid=False,
                problem=problem,
                receipt=kept,
                harness_revision=harness_revision,
            )
            if spec.has_effect:
                self._record_pending(record, spec, f"receipt invalid: {problem}")
            else:
                record.state = "failed"
            self._set_revision(harness_revision, cleared_by_write=spec.writes_workspace)
            raise Stop("receipt_invalid", problem) from None
        # Stored as the proposer sees it: data above the run's output cap is kept as
        # its head and the artifact holding the whole (_observe), not twice in full
        # (event and receipt row).
        observed = self._observe(receipt.data)
        self._emit(
            ev.ReceiptRecorded,
            call_id=record.call_id,
            tool=spec.name,
            attempt=record.attempts,
            valid=True,
            receipt={**receipt.model_dump(), "data": observed},
            harness_revision=harness_revision,
        )
        return receipt, observed

    def _before_retry(self, record: CallRecord, receipt: Receipt) -> None:
        """After a transient failure: stop if no retry is possible, else wait the backoff."""
        state = self.state
        infrastructure = self._infrastructure_failure(receipt)
        error = receipt.data.get("error")
        record.transient_reasons.append(infrastructure or (error if isinstance(error, str) else "transient failure"))
        self._guard("after the receipt", infrastructure)
        backoff = min(self.config.retry_base_seconds * 2 ** (record.attempts - 1), self.config.retry_max_seconds)
        if not self._attempts_left(record):
            raise no_retry("attempt_limit", f"{record.call_id} failed transiently {record.attempts} times", infrastructure)
        if self.clock.now() + backoff >= state.deadline:
            raise no_retry("deadline", f"a retry after {backoff:.2f}s backoff would cross the deadline", infrastructure)
        record.state = "allowed"
        reason = f"the sandbox failed, not the call (no effect): {infrastructure}" if infrastructure else "transient failure, no effect"
        self._emit(ev.Retry, call_id=record.call_id, attempt=record.attempts, backoff_seconds=backoff, reason=reason)
        self._checkpoint()
        self.clock.sleep(backoff)

    def _settle(
        self, record: CallRecord, spec: ToolSpec, receipt: Receipt, observed: dict[str, JSON], check: CheckDef | None
    ) -> fb.Result | fb.OutcomeUnknown:
        state = self.state
        if receipt.status == "unknown":
            if spec.has_effect:
                self._record_pending(record, spec, "the executor could not tell whether the effect happened")
            else:
                record.state = "unknown"
            self._set_revision(receipt.revision, cleared_by_write=spec.writes_workspace)
            return fb.OutcomeUnknown(call_id=record.call_id, tool=spec.name, idempotency_key=record.idempotency_key, data=observed)
        record.state = "completed"
        wrote = spec.writes_workspace and receipt.effect != "none"
        if wrote:
            self._note_written(record, spec)
        self._set_revision(receipt.revision, cleared_by_write=wrote)
        if spec.external_effect and receipt.effect == "applied":
            state.effects_applied.append(record.call_id)
        if check is not None:
            self._record_evidence(record, receipt, check)
        return fb.Result(
            call_id=record.call_id,
            tool=spec.name,
            revision=state.revision,
            data=observed,
            artifacts=list(receipt.artifacts),
            earlier_attempts=list(record.transient_reasons) if record.transient_reasons else None,
        )

    def _settle_operation(self, record: CallRecord, receipt: Receipt, feedback: fb.Feedback) -> None:
        operation = self.state.operations.get(record.idempotency_key or "")
        if operation is None or operation.call_id != record.call_id:
            return
        if receipt.status == "unknown":
            operation.status = "unknown"
        else:
            operation.status = "applied" if receipt.effect == "applied" else "not_applied"
        operation.outcome = feedback.to_json()

    def _observe(self, data: dict[str, JSON]) -> dict[str, JSON]:
        """What the proposer sees: the data, or a bounded summary plus an artifact ref."""
        text = canonical_json(data)
        cap = self.state.limits.max_output_bytes_per_call
        encoded = text.encode("utf-8")
        if len(encoded) <= cap:
            return data
        ref = self.artifacts.put(encoded, "application/json")
        head = encoded[: min(cap, 4000)].decode("utf-8", errors="ignore")
        return {"truncated": True, "size": len(encoded), "artifact": ref, "head": head}

    def _note_written(self, record: CallRecord, spec: ToolSpec) -> None:
        paths = spec.written_paths(record.args)
        self.state.changed_paths = sorted(set(self.state.changed_paths) | set(paths))

    def _record_evidence(self, record: CallRecord, receipt: Receipt, check: CheckDef) -> None:
        state = self.state
        data = receipt.data
        exit_code = data.get("exit_code")
        exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
        timed_out = data.get("timed_out") is True
        before = record.revision_before or state.revision
        evidence = EvidenceRecord(
            call_id=record.call_id,
            check_id=check.check_id,
            check_version=check.version,
            command=list(check.command),
            exit_code=exit_code,
            timed_out=timed_out,
            duration_ms=_int(data.get("duration_ms")),
            image_digest=str(data.get("image_digest", "")),
            revision=before,
            policy_version=state.policy_version,
            output_ref=_str_or_none(data.get("output_ref")),
            passed=exit_code == 0 and not timed_out,
            ts=self.clock.now(),
        )
        state.evidence.append(evidence)
        # Evidence is current only if the check left the revision it checked intact.
        current = before == state.revision
        if current:
            state.current_evidence[check.check_id] = len(state.evidence) - 1
        self._emit(
            ev.EvidenceRecorded,
            call_id=record.call_id,
            check_id=check.check_id,
            check_version=check.version,
            passed=evidence.passed,
            exit_code=exit_code,
            revision=before,
            current=current,
        )

    # -- pending effects and recovery --------------------------------------------

    def _record_pending(self, record: CallRecord, spec: ToolSpec, reason: str) -> None:
        record.state = "unknown"
        kind = "external" if spec.external_effect else "workspace"
        operation = self.state.operations.get(record.idempotency_key or "")
        if operation is not None and operation.call_id == record.call_id:
            operation.status = "unknown"
        if spec.writes_workspace:
            self._note_written(record, spec)
        self.state.pending_effects.append(
            PendingEffect(
                call_id=record.call_id,
                tool=spec.name,
                args=record.args,
                kind=kind,
                idempotency_key=record.idempotency_key,
                reason=reason,
                recorded_at=self.clock.now(),
            )
        )
        self._emit(
            ev.PendingEffectRecorded,
            call_id=record.call_id,
            tool=spec.name,
            kind=kind,
            idempotency_key=record.idempotency_key,
            reason=reason,
        )

    def _reconcile_pending(self) -> None:
        changed = False
        for effect in self.state.unresolved_effects():
            try:
                result = self.executor.reconcile(effect)
            except Exception:  # noqa: BLE001, S112 - a failed lookup leaves the outcome unknown, never "failed"
                continue
            if result.conflict:
                raise Stop("effect_conflict", f"{effect.call_id}: {result.detail}")
            if not result.resolved:
                continue
            changed = True
            effect.resolved = True
            effect.applied = result.applied
            effect.resolution = result.detail
            record = self.state.ledger.get(effect.call_id)
            if record is not None:
                record.state = "completed" if result.applied else "failed"
            if effect.kind == "workspace":
                self._set_revision(self.workspace.revision(), cleared_by_write=bool(result.applied))
            elif result.applied:
                self.state.effects_applied.append(effect.call_id)
            operation = self.state.operations.get(effect.idempotency_key or "")
            if operation is not None and operation.call_id == effect.call_id:
                operation.status = "applied" if result.applied else "not_applied"
                operation.outcome = {"reconciled": result.detail}
            self._emit(ev.EffectReconciled, call_id=effect.call_id, applied=bool(result.applied), detail=result.detail)
        if changed:
            self._checkpoint()

    def _recover_in_flight(self) -> None:
        """A call still marked 'started' means the previous driver died during it: its
        outcome is unknown until reconciled, whatever the chat history says.

        The call in progress runs again (admitted anew through the gates, against the
        re-read revision, as its next attempt within the attempts, the call budget
        and the deadline) when it cannot have had an effect: a check, or a workspace
        write that provably did not happen because the workspace is still at the
        revision it had before the call. Anything else becomes a pending effect."""
        interrupted = [r for r in self.state.ledger.values() if r.state == "started"]
        if not interrupted:
            return
        revision = self.workspace.revision()
        again: tuple[CallRecord, ToolSpec] | None = None
        for record in interrupted:
            spec = self.registry.get(record.tool)
            self._emit(ev.RunResumed, call_id=record.call_id, reason=f"recovered: {record.tool} attempt {record.attempts} was in flight")
            current = record.call_id == self.state.current_call
            unwritten = spec is not None and spec.writes_workspace and not spec.external_effect and revision == record.revision_before
            if spec is not None and current and (not spec.has_effect or unwritten):
                if unwritten:
                    detail = "the workspace is at the revision it had before the call: the write did not happen"
                    self._emit(ev.EffectReconciled, call_id=record.call_id, applied=False, detail=detail)
                record.state = "validated"
                again = (record, spec)
                continue
            if spec is not None and spec.has_effect:
                self._record_pending(record, spec, "the worker stopped during the call")
            else:
                record.state = "failed"
            self.state.feedback = fb.Interrupted(call_id=record.call_id, tool=record.tool).to_json()
        if again is None:
            self.state.current_call = None
            self.state.current_proposal = None
        self._set_revision(revision, cleared_by_write=False)
        self._checkpoint()
        self._reconcile_pending()
        if again is not None:
            record, spec = again
            reason = "interrupted: the worker stopped during the attempt"
            self._emit(ev.Retry, call_id=record.call_id, attempt=record.attempts, backoff_seconds=0.0, reason=reason)
            self._guard("before retrying an interrupted call")
            self._admit(record, spec)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
