"""The output of an execution without a terminal, as the Docker Engine API sends it
on an attached or exec socket: frames, each an 8-byte header (the stream: 1 standard
output, 2 standard error; three zero bytes; the payload's size, big-endian) and its
payload. Read here against that documented format, not through docker-py's
undocumented ``docker.utils.socket`` helpers, which may change in any release."""

from __future__ import annotations

import select
import struct
from collections.abc import Iterator
from typing import Any

HEADER = struct.Struct(">BxxxL")
CHUNK = 64 * 1024


def frames(sock: Any) -> Iterator[tuple[int, bytes]]:
    """(stream, bytes) as they arrive, a large frame in several pieces; ends at the
    end of the stream, also inside a frame. ``sock`` is a socket or the file object
    docker-py's ``exec_start(socket=True)`` gives (``socket.SocketIO``)."""
    while True:
        header = _exactly(sock, HEADER.size)
        if header is None:
            return
        stream, size = HEADER.unpack(header)
        while size > 0:
            data = _read(sock, min(size, CHUNK))
            if not data:
                return
            size -= len(data)
            yield stream, data


def _exactly(sock: Any, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        more = _read(sock, size - len(data))
        if not more:
            return None
        data += more
    return data


def _read(sock: Any, size: int) -> bytes:
    # Waits as long as the command is quiet: the socket's own timeout (docker-py sets
    # its client's) must not end a long silent check.
    poll = select.poll()
    poll.register(sock, select.POLLIN | select.POLLPRI)
    poll.poll()
    return bytes(sock.recv(size) if hasattr(sock, "recv") else sock.read(size))
