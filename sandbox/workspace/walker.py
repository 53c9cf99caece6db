"""A helper process of a tree walk (``sandbox/workspace/hashing.py``): it hashes the
directories the walk sends it, opened from the walk's root directory fd (inherited,
its number the one argument), and sends back each one's result, or that it could
not (the walk then hashes that directory itself, so any error is raised there).

Frames on stdin and stdout are a 4-byte length and a ``marshal`` body."""

from __future__ import annotations

import marshal
import os
import sys

from sandbox.workspace.hashing import frame, hash_directory


def read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main() -> None:
    root_fd = int(sys.argv[1])
    while (header := read_exactly(0, 4)) is not None:
        body = read_exactly(0, int.from_bytes(header, "big"))
        if body is None:
            return
        number, *task = marshal.loads(body)  # noqa: S302 - from the walk that started this process, over its own pipe
        try:
            reply = marshal.dumps((number, True, *hash_directory(root_fd, *task)))
        except Exception:  # noqa: BLE001 - whatever it was, the walk meets it again where it can raise it
            reply = marshal.dumps((number, False))
        write_all(1, frame(reply))


if __name__ == "__main__":
    main()
