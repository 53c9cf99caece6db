"""What a benchmark ran on and how busy the machine was, recorded beside every figure:
on a shared machine a figure without its load cannot be compared with another."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} vCPU {cpu}, {memory:.0f} GiB RAM, Linux {platform.release()}, Python {platform.python_version()}"


def load() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
