"""Building a run's proposer from its stored configuration and snapshot."""

from __future__ import annotations

from typing import Any

from runs.core.errors import FieldProblem, InputError
from runs.core.ports import Proposer
from runs.core.scripted import ScriptedProposer

PROPOSER_KINDS = ("scripted",)


def check_proposer_config(config: object) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise InputError("proposer", [FieldProblem("proposer", "must be an object with a 'kind'")])
    kind = config.get("kind")
    if kind not in PROPOSER_KINDS:
        raise InputError("proposer", [FieldProblem("proposer.kind", f"must be one of {', '.join(PROPOSER_KINDS)}")])
    if kind == "scripted":
        script = config.get("script")
        if not isinstance(script, list):
            raise InputError("proposer", [FieldProblem("proposer.script", "must be a JSON list of proposals")])
        extra = set(config) - {"kind", "script"}
        if extra:
            raise InputError("proposer", [FieldProblem(f"proposer.{sorted(extra)[0]}", "unexpected field")])
    return config


def build_proposer(config: dict[str, Any], snapshot: dict[str, Any]) -> Proposer:
    if config["kind"] == "scripted":
        return ScriptedProposer(config["script"], position=int(snapshot.get("position", 0)))
    raise ValueError(f"unknown proposer kind {config['kind']!r}")
