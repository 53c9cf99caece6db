"""Executor receipts (docs/design.md, Receipts). A receipt is the executor's attestation of
one attempt; it is checked against the call and the harness's own revision."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from core.jsonutil import JSON

Status = Literal["ok", "transient", "unknown"]
Effect = Literal["none", "applied", "unknown"]


class Receipt(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    call_id: str
    tool: str
    status: Status
    effect: Effect
    revision: str
    data: dict[str, JSON]
    artifacts: list[str] = []

    @property
    def infrastructure(self) -> str | None:
        """Why the infrastructure, not the call, failed this attempt: the executor's
        ``data.infrastructure`` of a transient receipt (a lost engine, a container
        removed from outside). Such an attempt proves nothing about the call."""
        reason = self.data.get("infrastructure")
        return reason if self.status == "transient" and isinstance(reason, str) and reason else None

    @property
    def infrastructure_lasting(self) -> bool:
        """The infrastructure's failure lasts until an operator acts (a runtime the
        engine has not registered): another attempt would fail the same way."""
        return self.infrastructure is not None and self.data.get("infrastructure_lasting") is True


class ReceiptInvalid(Exception):
    pass


def check_receipt(raw: object, call_id: str, tool: str, harness_revision: str) -> Receipt:
    """Raise ReceiptInvalid with the first rule the receipt breaks."""
    if raw is None:
        raise ReceiptInvalid("no receipt was returned")
    if not isinstance(raw, dict):
        raise ReceiptInvalid(f"a receipt must be an object, got {type(raw).__name__}")
    for name in ("call_id", "tool", "status", "effect", "revision", "data"):
        if name not in raw:
            raise ReceiptInvalid(f"receipt field {name!r} is missing")
    if not isinstance(raw["data"], dict):
        raise ReceiptInvalid("receipt data must be an object")
    if raw["status"] not in ("ok", "transient", "unknown"):
        raise ReceiptInvalid(f"receipt status {raw['status']!r} is not ok, transient or unknown")
    if raw["effect"] not in ("none", "applied", "unknown"):
        raise ReceiptInvalid(f"receipt effect {raw['effect']!r} is not none, applied or unknown")
    try:
        receipt = Receipt.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ReceiptInvalid(f"receipt field {where}: {first['msg']}") from None
    if receipt.call_id != call_id:
        raise ReceiptInvalid(f"receipt call_id {receipt.call_id!r} differs from the call {call_id!r}")
    if receipt.tool != tool:
        raise ReceiptInvalid(f"receipt tool {receipt.tool!r} differs from the call's tool {tool!r}")
    if receipt.revision != harness_revision:
        raise ReceiptInvalid(f"receipt revision {receipt.revision!r} differs from the harness's revision {harness_revision!r}")
    if receipt.status == "transient" and receipt.effect != "none":
        raise ReceiptInvalid(f"a transient receipt claims effect {receipt.effect!r}; it must be 'none'")
    return receipt
