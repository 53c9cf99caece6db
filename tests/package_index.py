"""A package index on loopback for the egress tests and bench: one tiny wheel built
here, behind a plain HTTP server as a PEP 503 simple index; and pip itself as a
zipapp the sandbox image lacks (Debian's python3 has no pip), built from the pip this
interpreter runs, for a check to run from the workspace."""

from __future__ import annotations

import base64
import functools
import hashlib
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pip

PACKAGE = "tinydep"
VERSION = "1.0"
MESSAGE = "tinydep installed through the egress proxy"
PIP_ZIPAPP = "pip.pyz"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(directory: Path) -> Path:
    """A pure-Python wheel of one module, written by hand (the format is a zip with
    its metadata and a RECORD of hashes)."""
    info = f"{PACKAGE}-{VERSION}.dist-info"
    files = {
        f"{PACKAGE}/__init__.py": f"MESSAGE = {MESSAGE!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: harness-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items()) + f"{info}/RECORD,,\n"
    wheel = directory / f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{info}/RECORD", record)
    return wheel


def build_index(root: Path) -> None:
    """``root/simple/`` as PEP 503 lays it out, the wheel under ``root/files/``."""
    files = root / "files"
    files.mkdir(parents=True)
    wheel = build_wheel(files)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project = root / "simple" / PACKAGE
    project.mkdir(parents=True)
    (root / "simple" / "index.html").write_text(f'<!DOCTYPE html><html><body><a href="{PACKAGE}/">{PACKAGE}</a></body></html>\n')
    link = f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>'
    (project / "index.html").write_text(f"<!DOCTYPE html><html><body>{link}</body></html>\n")


def build_pip_zipapp(target: Path) -> None:
    """pip as one file: its package (vendored libraries included) and a __main__."""
    package = Path(pip.__file__).parent
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, f"pip/{path.relative_to(package)}")
        archive.writestr("__main__.py", "import runpy\nrunpy.run_module('pip', run_name='__main__', alter_sys=True)\n")


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass(frozen=True)
class PackageIndex:
    port: int

    @property
    def url(self) -> str:
        # By name: the proxy refuses raw addresses, and resolves names in the worker.
        return f"http://localhost:{self.port}/simple/"


@contextmanager
def serve_index(root: Path) -> Iterator[PackageIndex]:
    """The index under ``root`` on a free loopback port, for as long as the block lasts."""
    build_index(root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name="package-index", daemon=True)
    thread.start()
    try:
        yield PackageIndex(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def pip_install(index: PackageIndex) -> list[str]:
    """A check's command: install the package from the index into scratch and import it."""
    install = (
        f"python3 {PIP_ZIPAPP} install --no-cache-dir --disable-pip-version-check --no-input --retries 0 --timeout 10"
        f" --target /tmp/site --index-url {index.url} {PACKAGE}"
    )
    return ["sh", "-c", f"{install} && PYTHONPATH=/tmp/site python3 -c 'import {PACKAGE}; print({PACKAGE}.MESSAGE)'"]
