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


def test_it_cites_only_sections_that_exist():
    sections = set(re.findall(r"^## (.+)$", (ROOT / "docs" / "design.md").read_text(), re.MULTILINE))
    cited: dict[str, set[str]] = {}
    for path in tracked_text_files():
        text = " ".join(path.read_text(errors="replace").split())
        for match in CITATION.finditer(text):
            for name in re.split(r",\s*", match.group(1)):
                cited.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert cited, "nothing cites docs/design.md"
    assert {name: files for name, files in cited.items() if name not in sections} == {}


def test_it_cites_no_design_file_outside_the_repository():
    outside = re.compile(r"DESIGN section|DESIGN\.md|\.\./shared/")
    found = [
        str(p.relative_to(ROOT))
        for p in tracked_text_files()
        if p.name != Path(__file__).name and outside.search(p.read_text(errors="replace"))
    ]
    assert found == []
