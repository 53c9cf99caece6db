"""Each tool's knowledge is in its registry entry (core.tools) and, for what
runs it, in its sandbox entry beside its handler (sandbox.tools.registry): the loop, the
adapters and the executor ask the entries, never a tool's name."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

from core.simulated import SIM_TOOLS
from core.tools import BUILTIN_TOOLS, builtin_registry
from sandbox.tools.registry import TOOLS
from tests.source_files import python_files

ROOT = Path(__file__).resolve().parent.parent
# Where tool names may be spelled: the two registries (the sandbox's with the handlers
# it lists, each naming its own tool in what it says), and the demo scripts and the
# in-memory stand-ins that play a model and a sandbox.
REGISTRIES = {
    "core/tools.py",
    "sandbox/tools/registry.py",
    "sandbox/tools/files.py",
    "sandbox/tools/check.py",
    "sandbox/tools/effects.py",
    "core/scenarios.py",
    "core/simulated.py",
}


def test_it_gives_every_registered_tool_exactly_one_sandbox_entry() -> None:
    registered = {spec.name for spec in BUILTIN_TOOLS if not spec.finishes}
    assert set(TOOLS) == registered


def test_it_shows_a_reviewer_every_effect_and_can_look_up_every_external_one() -> None:
    for spec in BUILTIN_TOOLS:
        if spec.finishes:
            continue
        entry = TOOLS[spec.name]
        # A workspace write is previewed; an external call's effect is fixed (and its
        # text made from it) before a reviewer is asked.
        assert (entry.preview is not None) == spec.writes_workspace, spec.name
        assert (entry.plan is not None) == spec.external_effect, spec.name
        assert (entry.reconcile is not None) == spec.external_effect, spec.name
        assert bool(spec.reviewer_summary) == spec.has_effect, spec.name


def test_it_previews_in_the_simulation_what_the_registry_says_has_an_effect() -> None:
    # The stand-in sandbox plays a subset of the tools, each from its own entry.
    specs = {spec.name: spec for spec in BUILTIN_TOOLS}
    for name, entry in SIM_TOOLS.items():
        assert (entry.preview is not None) == specs[name].has_effect, name


def test_it_has_one_tool_that_finishes_and_offers_it_whatever_the_contract_allows() -> None:
    registry = builtin_registry()
    finish = registry.finish()
    assert [spec.name for spec in registry.visible([])] == [finish.name]


def product_packages() -> list[str]:
    """Every package of the product, as the layers contract lists them (so a new
    package is read too)."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config["importlinter"]["root_packages"].split()


def test_it_spells_no_tool_name_outside_the_registries() -> None:
    names = {spec.name for spec in BUILTIN_TOOLS}
    found = []
    for package in product_packages():
        for path in python_files(package):
            where = str(path.relative_to(ROOT))
            # node_modules: the agent CLIs npm installs under sandbox/agent/clis (not ours).
            if where in REGISTRIES or "migrations" in path.parts or "node_modules" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{where}:{node.lineno} {node.value!r}")
    assert found == []
