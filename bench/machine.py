"""What a benchmark ran on and how busy the machine was, recorded beside every figure:
on a shared machine a figure without its load cannot be compared with another. And the
environment its child processes run the product in, so that every bench measures the
same configuration."""

from __future__ import annotations

import os
import platform
import secrets
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


def child_env(var: Path | str, database_url: str | None = None, **more: str) -> dict[str, str]:
    """The environment of a child process running the product as deployed: DEBUG off (on,
    Django keeps every statement's text and, on SQLite, runs one more statement per
    statement to render it), so a SECRET_KEY of its own, the deployment's settings, its
    files under ``var`` and its database ``database_url``, SQLite under ``var`` by default;
    then the bench's own settings, ``more``."""
    return {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_hex(32),
        "DJANGO_SETTINGS_MODULE": "harness_site.settings",
        "DATABASE_URL": database_url or f"sqlite:///{Path(var) / 'harness.sqlite3'}",
        "HARNESS_VAR_DIR": str(var),
        **more,
    }
