"""The design is in the repository: code and docs cite docs/design.md by section
name, every section they cite exists, and nothing cites a design file outside."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"docs/design\.md[,:]?\s+\(?((?:[A-Z][a-z]+(?: [a-z]+)?)(?:,\s*[A-Z][a-z]+(?: [a-z]+)?)*)")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / n for n in names if n.endswith((".py", ".md", ".html", ".js", ".yaml")) and (ROOT / n).is_file()]


def test_it_cites_only_sections_that_exist() -> None:
    sections = set(re.findall(r"^## (.+)$", (ROOT / "docs" / "design.md").read_text(), re.MULTILINE))
    cited: dict[str, set[str]] = {}
    for path in tracked_text_files():
        text = " ".join(path.read_text(errors="replace").split())
        for match in CITATION.finditer(text):
            for name in re.split(r",\s*", match.group(1)):
                cited.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert cited, "nothing cites docs/design.md"
    assert {name: files for name, files in cited.items() if name not in sections} == {}


def test_it_cites_no_design_file_outside_the_repository() -> None:
    outside = re.compile(r"DESIGN section|DESIGN\.md|\.\./shared/")
    found = [
        str(p.relative_to(ROOT))
        for p in tracked_text_files()
        if p.name != Path(__file__).name and outside.search(p.read_text(errors="replace"))
    ]
    assert found == []


GATE = re.compile(r"^(\d+)\. \*\*([^*]+)\*\*", re.MULTILINE)
GATE_CITATION = re.compile(r"\b[Gg]ates? (\d+)(?:-(\d+))?(?:: | \(|, )?([a-z ,]*)")


def test_it_numbers_the_gates_in_code_as_the_design_does() -> None:
    """A comment that cites gates by number names them too, as docs/design.md's list
    (Gates) numbers them."""
    design = (ROOT / "docs" / "design.md").read_text()
    gates = {int(number): name.lower() for number, name in GATE.findall(design.split("## Gates", 1)[1].split("\n## ", 1)[0])}
    assert sorted(gates) == list(range(1, len(gates) + 1)) and gates[1] == "parse"
    wrong = []
    for path in tracked_text_files():
        if path.suffix != ".py":
            continue
        text = " ".join(path.read_text(errors="replace").split())
        for match in GATE_CITATION.finditer(text):
            first, last = int(match.group(1)), int(match.group(2) or match.group(1))
            expected = [gates.get(n, "?") for n in range(first, last + 1)]
            named = [name.strip() for name in match.group(3).split(",") if name.strip()][: len(expected)]
            if named != expected:
                wrong.append(f"{path.relative_to(ROOT)}: {match.group(0)!r} should name {', '.join(expected)}")
    assert wrong == []
