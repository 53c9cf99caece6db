"""A real OpenSSH server on 127.0.0.1 for tests: Debian's sshd, started on a free
port with its own host key, one authorized key made for the test and a
configuration in a temporary directory. git runs ``git-upload-pack`` and
``git-receive-pack`` through it as on any ssh remote."""

from __future__ import annotations

import getpass
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    key: Path  # the authorized client key
    other_key: Path  # a key the server does not know
    known_hosts: Path  # the server's host key, as a client's known_hosts line

    def url(self, path: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}"


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def ssh_server(root: Path) -> Iterator[SshServer]:
    root.mkdir(parents=True, exist_ok=True)
    host_key = _keygen(root / "host_ed25519")
    key = _keygen(root / "client_ed25519")
    other = _keygen(root / "other_ed25519")
    (root / "authorized_keys").write_text((root / "client_ed25519.pub").read_text())
    port = _free_port()
    user = getpass.getuser()
    host_public = (root / "host_ed25519.pub").read_text().split()
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_public[0]} {host_public[1]}\n")
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {root / 'sshd.pid'}",
                f"AuthorizedKeysFile {root / 'authorized_keys'}",
                "StrictModes no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                f"AllowUsers {user}",
                "LogLevel VERBOSE",
                "",
            ]
        )
    )
    # sshd's privilege separation needs this directory (a service start makes it).
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = open(root / "sshd.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            assert proc.poll() is None, f"sshd exited: {(root / 'sshd.log').read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"sshd not listening: {(root / 'sshd.log').read_text()}"
                time.sleep(0.05)
        yield SshServer(port, user, key, other, known)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
