"""The Docker Engine API's multiplexed stream of an execution without a terminal
(sandbox/exec_stream.py), read by Harness itself rather than through docker-py's
undocumented ``docker.utils.socket.frames_iter``: each frame an 8-byte header (the
stream, three zero bytes, the payload's size big-endian) and its payload. Pure logic
over a socket pair; the container tests read real executions through it."""

from __future__ import annotations

import socket
import struct
import threading

from sandbox.exec_stream import frames


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def sent(data: bytes, *, chunk: int = 0) -> socket.socket:
    """The reading end of a socket pair whose other end sends ``data`` (``chunk``
    bytes at a time, when given) and closes."""
    ours, theirs = socket.socketpair()

    def send() -> None:
        with theirs:
            step = chunk or len(data) or 1
            for start in range(0, len(data), step):
                theirs.sendall(data[start : start + step])

    threading.Thread(target=send, daemon=True).start()
    return ours


def test_it_reads_each_stream_s_payload_in_order() -> None:
    data = frame(1, b"out one\n") + frame(2, b"err\n") + frame(1, b"out two\n")
    with sent(data) as sock:
        got = list(frames(sock))
    assert got == [(1, b"out one\n"), (2, b"err\n"), (1, b"out two\n")]


def test_it_reads_headers_and_payloads_split_across_reads() -> None:
    data = frame(1, b"x" * 10_000) + frame(2, b"tail")
    with sent(data, chunk=3) as sock:
        got = list(frames(sock))
    assert {stream for stream, _ in got} == {1, 2}
    assert b"".join(payload for stream, payload in got if stream == 1) == b"x" * 10_000
    assert b"".join(payload for stream, payload in got if stream == 2) == b"tail"


def test_it_ends_at_end_of_stream_even_inside_a_frame() -> None:
    whole = frame(1, b"complete")
    cut = frame(1, b"0123456789")[:12]
    with sent(whole + cut) as sock:
        got = list(frames(sock))
    assert got == [(1, b"complete"), (1, b"0123")]
    with sent(whole + frame(2, b"x")[:5]) as sock:
        assert list(frames(sock)) == [(1, b"complete")]


def test_it_reads_through_the_file_object_docker_py_gives() -> None:
    # exec_start(socket=True) gives a socket.SocketIO over the engine's connection.
    data = frame(1, b"hello") + frame(2, b"world")
    with sent(data) as sock:
        got = list(frames(socket.SocketIO(sock, "rb")))
    assert got == [(1, b"hello"), (2, b"world")]


def test_it_waits_past_the_socket_s_timeout_for_a_quiet_command() -> None:
    # docker-py gives the socket its client's timeout; a command may be silent longer.
    ours, theirs = socket.socketpair()
    ours.settimeout(0.05)
    done = threading.Event()

    def late() -> None:
        done.wait(0.3)
        with theirs:
            theirs.sendall(frame(1, b"late"))

    threading.Thread(target=late, daemon=True).start()
    with ours:
        assert list(frames(ours)) == [(1, b"late")]
