"""What the install scripts read from a lock (requirements.lock, requirements-dev.lock;
written by scripts/lock.sh):

    python3 scripts/locked.py check LOCK
        exits 1, naming them, when packages of LOCK are not installed at its versions
        (scripts/setup.sh: a fraction of a second, where pip takes many seconds even
        when there is nothing to do)
    python3 scripts/locked.py part LOCK NAME...
        prints LOCK's entries, hashes included, for the NAMEs and every package they
        need, by the lock's own `# via` lines: a file pip installs with
        --require-hashes without installing the rest of LOCK (scripts/up.sh's mail
        catcher, the sandbox image's MCP SDK)

Standard library only: it runs before anything is installed."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Entry:
    name: str
    version: str
    lines: list[str]
    needed_by: set[str] = field(default_factory=set)


def entries(lock: Path) -> dict[str, Entry]:
    """The lock's requirements by normalized name: each from its `name==version \\`
    line through its hash lines and its `# via` comments."""
    found: dict[str, Entry] = {}
    current: Entry | None = None
    for line in lock.read_text().splitlines():
        if (start := REQUIREMENT.match(line)) is not None:
            current = Entry(normalized(start.group(1)), start.group(2), [line])
            found[current.name] = current
        elif current is not None and line.startswith(" "):
            text = line.strip()
            if text.startswith("#"):
                text = re.sub(r"^via(\s|$)", "", text.lstrip("#").strip()).strip()
                if text and not text.startswith("-"):
                    current.needed_by.add(normalized(text.split()[0]))
            else:
                current.lines.append(line)
        else:
            current = None
    return found


def check(lock: Path) -> int:
    wrong = []
    for entry in entries(lock).values():
        try:
            installed = version(entry.name)
        except PackageNotFoundError:
            installed = None
        if installed != entry.version:
            wrong.append(f"{entry.name}=={entry.version}")
    if wrong:
        print(f"not installed as locked in {lock.name}: {' '.join(wrong)}", file=sys.stderr)
    return 1 if wrong else 0


def part(lock: Path, names: list[str]) -> int:
    locked = entries(lock)
    wanted = {normalized(name) for name in names}
    unknown = wanted - locked.keys()
    if unknown:
        print(f"not in {lock.name}: {' '.join(sorted(unknown))}", file=sys.stderr)
        return 1
    while grown := {entry.name for entry in locked.values() if entry.needed_by & wanted} - wanted:
        wanted |= grown
    for entry in locked.values():
        if entry.name in wanted:
            print("\n".join(entry.lines))
    return 0


def main(argv: list[str]) -> int:
    match argv:
        case ["check", lock]:
            return check(Path(lock))
        case ["part", lock, *names] if names:
            return part(Path(lock), names)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
