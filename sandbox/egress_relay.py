"""The in-container half of a check's egress: a relay, run as the sandbox user beside
the check, that listens on the container's own loopback and carries each connection's
bytes over its standard input and output to the proxy in the worker
(``sandbox.egress``). It decides nothing: whatever it sends, the proxy checks against
the check's policy, and so would anything else a check wrote into the stream.

Frames both ways: connection id (4 bytes), kind (1), length (4), then the bytes.
The container keeps ``network=none`` under runc and runsc alike: the relay's stdio is
its only way out, and the proxy the only thing at the other end."""

from __future__ import annotations

import struct

FRAME = struct.Struct(">IBI")
READY, OPEN, DATA, CLOSE = 1, 2, 3, 4
MAX_FRAME = 1 << 20

RELAY = f"""
import socket, struct, sys, threading
FRAME = struct.Struct(">IBI")
READY, OPEN, DATA, CLOSE = {READY}, {OPEN}, {DATA}, {CLOSE}
out, inp = sys.stdout.buffer, sys.stdin.buffer
lock = threading.Lock()
conns = {{}}

def send(cid, kind, data=b""):
    with lock:
        out.write(FRAME.pack(cid, kind, len(data)) + data)
        out.flush()

def pump(cid, s):
    try:
        while True:
            data = s.recv(65536)
            if not data:
                break
            send(cid, DATA, data)
    except OSError:
        pass
    send(cid, CLOSE)
    s.close()

def accept(server):
    n = 0
    while True:
        s, _ = server.accept()
        n += 1
        conns[n] = s
        send(n, OPEN)
        threading.Thread(target=pump, args=(n, s), daemon=True).start()

def read(n):
    data = inp.read(n) if n else b""
    if len(data) < n:
        raise SystemExit(0)
    return data

server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(64)
threading.Thread(target=accept, args=(server,), daemon=True).start()
send(0, READY, str(server.getsockname()[1]).encode())
while True:
    cid, kind, size = FRAME.unpack(read(FRAME.size))
    data = read(size)
    s = conns.get(cid)
    if s is None:
        continue
    try:
        if kind == DATA:
            s.sendall(data)
        elif kind == CLOSE:
            conns.pop(cid, None)
            s.shutdown(socket.SHUT_WR)
    except OSError:
        conns.pop(cid, None)
"""
