"""Each receipt rejection rule (docs/design.md, Receipts), and a receipt that passes."""

from __future__ import annotations

import pytest

from core.ports import Call
from core.receipts import ReceiptInvalid, check_receipt

GOOD = {"call_id": "c1", "tool": "read_file", "status": "ok", "effect": "none", "revision": "r1", "data": {}, "artifacts": []}


def test_it_accepts_a_consistent_receipt() -> None:
    assert check_receipt(dict(GOOD), "c1", "read_file", "r1").status == "ok"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (None, "no receipt"),
        ("ok", "must be an object"),
        ({k: v for k, v in GOOD.items() if k != "revision"}, "'revision' is missing"),
        ({**GOOD, "call_id": "c2"}, "call_id 'c2' differs"),
        ({**GOOD, "tool": "write_file"}, "tool 'write_file' differs"),
        ({**GOOD, "revision": "r0"}, "revision 'r0' differs"),
        ({**GOOD, "status": "done"}, "status 'done' is not"),
        ({**GOOD, "effect": "maybe"}, "effect 'maybe' is not"),
        ({**GOOD, "data": ["x"]}, "data must be an object"),
        ({**GOOD, "status": "transient", "effect": "applied"}, "transient receipt claims effect 'applied'"),
        ({**GOOD, "status": "transient", "effect": "unknown"}, "transient receipt claims effect 'unknown'"),
        ({**GOOD, "passed": True}, "extra"),
    ],
)
def test_it_rejects_an_inconsistent_receipt(raw: object, problem: str) -> None:
    with pytest.raises(ReceiptInvalid) as caught:
        check_receipt(raw, "c1", "read_file", "r1")
    assert problem.lower() in str(caught.value).lower()


def test_it_stops_the_run_on_a_missing_receipt_from_a_crashing_executor() -> None:
    from core.scenarios import build_rig, call

    rig = build_rig([call("read_file", path="src/calc.py")])

    def explode(call: Call) -> None:
        raise RuntimeError("socket closed")

    rig.harness.context.executor = type("Broken", (), {"execute": staticmethod(explode), "reconcile": None})()
    rig.harness.run()
    assert rig.state.outcome == "receipt_invalid"
    assert "socket closed" in rig.state.stop_message
