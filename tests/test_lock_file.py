"""requirements.lock, requirements-dev.lock and bench/requirements.lock (scripts/lock.sh,
`make lock`) are what gets installed, with pip's --require-hashes: they must say what
requirements.txt, requirements-dev.txt and bench/requirements.txt pin, give every
package a hash, and leave nothing to float."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures_services import ROOT

PRODUCT_PINS = ROOT / "requirements.txt"
DEV_PINS = ROOT / "requirements-dev.txt"
PRODUCT_LOCK = ROOT / "requirements.lock"
DEV_LOCK = ROOT / "requirements-dev.lock"
# The benchmarks' peers (`make bench`, in CI too), resolved under the dev lock.
BENCH_PINS = ROOT / "bench" / "requirements.txt"
BENCH_LOCK = ROOT / "bench" / "requirements.lock"
LOCKS = ((PRODUCT_PINS, PRODUCT_LOCK), (DEV_PINS, DEV_LOCK), (BENCH_PINS, BENCH_LOCK))

PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\[[^\]]*\])?==([^\s;]+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def normalized(name: str) -> str:
    """A distribution's name as PyPI compares it (PEP 503): Pygments is pygments."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """name -> version of each `==` line, through `-r` includes."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found |= pins(path.parent / line[3:].strip())
        elif (pin := PIN.fullmatch(line)) is not None:
            found[normalized(pin.group(1))] = pin.group(2)
    return found


@dataclass
class Entry:
    line: int
    requirement: str
    hashes: list[str] = field(default_factory=list)


def entries(path: Path) -> list[Entry]:
    """One per requirement of a lock: its first line, joined over its backslash
    continuations (where the hashes are); comments dropped."""
    found: list[Entry] = []
    current: Entry | None = None
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            current = None
            continue
        words = text.rstrip("\\").split()
        if current is None:
            current = Entry(number, words[0])
            found.append(current)
            words = words[1:]
        current.hashes += [word for word in words if word.startswith("--hash=")]
        if not text.endswith("\\"):
            current = None
    return found


def locked(path: Path) -> dict[str, str]:
    versions: dict[str, str] = {}
    for entry in entries(path):
        pin = PIN.fullmatch(entry.requirement)
        assert pin is not None, f"{path.name}:{entry.line}: {entry.requirement!r} is not pinned with ==; run make lock"
        versions[normalized(pin.group(1))] = pin.group(2)
    return versions


def test_it_locks_every_pin_at_its_pinned_version() -> None:
    for source, lock in LOCKS:
        versions = locked(lock)
        wrong = [
            f"{name}: {source.name} pins {pinned}, {lock.name} has {versions[name]}"
            if name in versions
            else f"{name}: {source.name} pins {pinned}, {lock.name} lacks it"
            for name, pinned in pins(source).items()
            if versions.get(name) != pinned
        ]
        assert not wrong, "the lock is behind its pins (run make lock):\n" + "\n".join(wrong)


def test_it_gives_every_locked_package_a_sha256_hash() -> None:
    for _source, lock in LOCKS:
        found = entries(lock)
        assert len(found) > 20, f"{lock.name} holds {len(found)} requirements"
        bare = [f"{lock.name}:{entry.line}: {entry.requirement}" for entry in found if not any(HASH.fullmatch(h) for h in entry.hashes)]
        assert not bare, "locked without a --hash=sha256: (run make lock):\n" + "\n".join(bare)


def test_it_leaves_nothing_in_the_locks_floating() -> None:
    for _source, lock in LOCKS:
        floating = [f"{lock.name}:{entry.line}: {entry.requirement}" for entry in entries(lock) if PIN.fullmatch(entry.requirement) is None]
        assert not floating, "not pinned with == (run make lock):\n" + "\n".join(floating)


def test_it_installs_in_the_tests_the_versions_the_product_ships() -> None:
    # The dev lock is resolved under the product's (scripts/lock.sh): every product
    # package is in it at the same version.
    product, dev = locked(PRODUCT_LOCK), locked(DEV_LOCK)
    differ = [
        f"{name}: {PRODUCT_LOCK.name} has {version}, {DEV_LOCK.name} {dev.get(name, 'nothing')}"
        for name, version in product.items()
        if dev.get(name) != version
    ]
    assert not differ, "the dev lock disagrees with the product's (run make lock):\n" + "\n".join(differ)


def test_it_measures_the_benchmarks_beside_the_versions_the_tests_run() -> None:
    # The bench lock is resolved under the dev lock: a package both hold is one version.
    dev, bench = locked(DEV_LOCK), locked(BENCH_LOCK)
    differ = [
        f"{name}: {DEV_LOCK.name} has {dev[name]}, bench/{BENCH_LOCK.name} {version}"
        for name, version in bench.items()
        if dev.get(name, version) != version
    ]
    assert not differ, "the bench lock disagrees with the dev lock (run make lock):\n" + "\n".join(differ)


def test_it_says_in_each_lock_how_to_regenerate_it() -> None:
    for source, lock in LOCKS:
        header = lock.read_text().splitlines()[:2]
        assert header[0].startswith("# This file was autogenerated by uv"), f"{lock.name} was not written by scripts/lock.sh"
        assert (
            header[1].startswith("#    uv pip compile --generate-hashes ")
            and f" {source.relative_to(ROOT)} " in header[1]
            and header[1].endswith(f"-o {lock.relative_to(ROOT)}")
        ), header[1]
