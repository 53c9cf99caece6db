"""The sandbox image with the MCP SDK and the workspace search server in it, for
tests/test_mcp_stdio.py: derived from the configured sandbox image, the SDK's wheels
(pinned to the worker's own ``mcp`` version, downloaded once and cached) unpacked into
/opt/harness-mcp/site, the server beside them. Tagged by a digest over the base
image's id, the wheel set and the server, and removed by the caller."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import docker

SERVER = Path(__file__).with_name("workspace_search.py")
SITE = "/opt/harness-mcp/site"
COMMAND = ["env", f"PYTHONPATH={SITE}", "python3", "/opt/harness-mcp/servers/workspace_search.py"]


def wheels() -> list[Path]:
    pinned = version("mcp")
    cache = Path(os.environ.get("HARNESS_CACHE_DIR", "/var/cache/harness")) / "mcp-wheels" / pinned
    if not any(cache.glob("mcp-*.whl")):
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"mcp=={pinned}", "--only-binary=:all:", "--python-version", "3.11"]
            + ["--platform", "manylinux2014_x86_64", "-q", "-d", str(cache)],
            check=True,
            timeout=600,
        )
    return sorted(cache.glob("*.whl"))


def _context(base: str, found: list[Path]) -> bytes:
    """A build context: the wheels unpacked (a wheel's files are its installed form),
    the server, and the Dockerfile."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for wheel in found:
            with zipfile.ZipFile(wheel) as archive:
                for item in archive.infolist():
                    if item.is_dir():
                        continue
                    info = tarfile.TarInfo(f"site/{item.filename}")
                    info.size = item.file_size
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(archive.read(item)))
        tar.add(SERVER, arcname="workspace_search.py")
        dockerfile = (f"FROM {base}\nUSER 0\nCOPY site {SITE}\nCOPY workspace_search.py /opt/harness-mcp/servers/\nUSER 65534\n").encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    return out.getvalue()


@contextmanager
def search_image(base: str) -> Iterator[str]:
    client = docker.from_env()
    found = wheels()
    digest = hashlib.sha256()
    digest.update(str(client.images.get(base).id).encode())
    for wheel in found:
        digest.update(wheel.name.encode() + hashlib.sha256(wheel.read_bytes()).digest())
    digest.update(SERVER.read_bytes())
    tag = f"harness-sandbox-mcp-test:{digest.hexdigest()[:16]}"
    client.images.build(fileobj=io.BytesIO(_context(base, found)), custom_context=True, tag=tag, rm=True)
    try:
        yield tag
    finally:
        client.images.remove(tag, force=True)
        client.close()
