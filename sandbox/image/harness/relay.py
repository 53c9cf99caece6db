"""The in-container half of a check's egress (``sandbox.egress.proxy`` is the other):
run as the sandbox user beside the check, it listens on the container's own loopback
and carries each connection's bytes over its standard input and output to the proxy
in the worker. It decides nothing: whatever it sends, the proxy checks against the
check's policy, and so would anything else a check wrote into the stream.

Frames both ways: connection id (4 bytes), kind (1), length (4), then the bytes; the
kinds are ``sandbox.egress.protocol``'s (tests/test_sandbox_programs.py holds the two
to the same values). It also answers DNS on the container's loopback port 53 (UDP,
the container's only resolver): every lookup is refused, since names resolve only
through the proxy, and each query goes to the proxy as a DNS frame, so the attempt
is recorded. Runs as the image's python3 with nothing but the standard library.

Each port given as an argument is a forward (an agent's container, sandbox/agent): the
relay listens on it too, on the container's loopback, and a connection accepted there
opens with that port as the OPEN frame's bytes, so the proxy sends it to the one
destination the worker set for that port (and checks each request it carries there);
a connection to the first port opens with no bytes and is a proxy request."""

from __future__ import annotations

import itertools
import socket
import struct
import sys
import threading

FRAME = struct.Struct(">IBI")
READY, OPEN, DATA, CLOSE, DNS = 1, 2, 3, 4, 5
# A DNS query is sent on as at most this many bytes (a UDP answer's classic limit).
DNS_QUERY_BYTES = 512

out, inp = sys.stdout.buffer, sys.stdin.buffer
# One writer at a time on standard output: a frame is written whole or not at all.
lock = threading.Lock()
conns: dict[int, socket.socket] = {}
# One numbering for every listener's connections (next() on a count is atomic).
numbers = itertools.count(1)


def send(cid: int, kind: int, data: bytes = b"") -> None:
    with lock:
        out.write(FRAME.pack(cid, kind, len(data)) + data)
        out.flush()


def pump(cid: int, conn: socket.socket) -> None:
    """A connection's bytes to the proxy, then its close."""
    try:
        while data := conn.recv(65536):
            send(cid, DATA, data)
    except OSError:
        pass  # the check or the proxy ended it: the close below says so
    send(cid, CLOSE)
    conn.close()


def accept(server: socket.socket, forward: bytes = b"") -> None:
    while True:
        conn, _ = server.accept()
        number = next(numbers)
        conns[number] = conn
        send(number, OPEN, forward)
        threading.Thread(target=pump, args=(number, conn), daemon=True).start()


def refused(query: bytes) -> bytes:
    """The answer to a DNS query: its id and question, REFUSED (rcode 5), no records."""
    end = 12
    while end < len(query) and query[end]:
        end += 1 + query[end]
    question = query[12 : end + 5]
    flags = 0x8000 | (query[2] & 0x79) << 8 | 0x0080 | 5
    return query[:2] + struct.pack(">HHHHH", flags, 1, 0, 0, 0) + question


def refuse_dns(sock: socket.socket) -> None:
    while True:
        query, peer = sock.recvfrom(4096)
        if len(query) < 12:
            continue  # not a DNS header: nothing to answer or record
        send(0, DNS, query[:DNS_QUERY_BYTES])
        sock.sendto(refused(query), peer)


def read(size: int) -> bytes:
    data = inp.read(size) if size else b""
    if len(data) < size:
        raise SystemExit(0)  # the proxy closed the stream: the check is over
    return data


def listen(port: int) -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen(64)
    return server


def main() -> None:
    server = listen(0)
    # The forwards first: a port that cannot be bound ends the relay before READY.
    for port in map(int, sys.argv[1:]):
        threading.Thread(target=accept, args=(listen(port), str(port).encode()), daemon=True).start()
    threading.Thread(target=accept, args=(server,), daemon=True).start()
    try:
        dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        dns.bind(("127.0.0.1", 53))
        threading.Thread(target=refuse_dns, args=(dns,), daemon=True).start()
    except OSError as error:
        sys.stderr.write(f"no DNS refusal on port 53: {error}\n")
    send(0, READY, str(server.getsockname()[1]).encode())
    while True:
        cid, kind, size = FRAME.unpack(read(FRAME.size))
        data = read(size)
        conn = conns.get(cid)
        if conn is None:
            continue  # already closed on this side
        try:
            if kind == DATA:
                conn.sendall(data)
            elif kind == CLOSE:
                conns.pop(cid, None)
                conn.shutdown(socket.SHUT_WR)
        except OSError:
            conns.pop(cid, None)


if __name__ == "__main__":
    main()
