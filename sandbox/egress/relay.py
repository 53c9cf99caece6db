"""The in-container half of a check's egress: a relay, run as the sandbox user beside
the check, that listens on the container's own loopback and carries each connection's
bytes over its standard input and output to the proxy in the worker
(``sandbox.egress.proxy``). It decides nothing: whatever it sends, the proxy checks against
the check's policy, and so would anything else a check wrote into the stream.

Frames both ways: connection id (4 bytes), kind (1), length (4), then the bytes.

The relay also answers DNS on the container's loopback port 53 (UDP, the container's
only resolver): every lookup is refused, since names resolve only through the proxy,
and each query goes to the proxy as a DNS frame, so the attempt is recorded.
The container keeps ``network=none`` under runc and runsc alike: the relay's stdio is
its only way out, and the proxy the only thing at the other end."""

from __future__ import annotations

import struct

FRAME = struct.Struct(">IBI")
READY, OPEN, DATA, CLOSE, DNS = 1, 2, 3, 4, 5
MAX_FRAME = 1 << 20

RELAY = f"""
import socket, struct, sys, threading
FRAME = struct.Struct(">IBI")
READY, OPEN, DATA, CLOSE, DNS = {READY}, {OPEN}, {DATA}, {CLOSE}, {DNS}
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

def refuse_dns(sock):
    while True:
        query, peer = sock.recvfrom(4096)
        if len(query) < 12:
            continue
        send(0, DNS, query[:512])
        end = 12
        while end < len(query) and query[end]:
            end += 1 + query[end]
        question = query[12:end + 5]
        flags = 0x8000 | (query[2] & 0x79) << 8 | 0x0080 | 5
        sock.sendto(query[:2] + struct.pack(">HHHHH", flags, 1, 0, 0, 0) + question, peer)

def read(n):
    data = inp.read(n) if n else b""
    if len(data) < n:
        raise SystemExit(0)
    return data

server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(64)
threading.Thread(target=accept, args=(server,), daemon=True).start()
try:
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))
    threading.Thread(target=refuse_dns, args=(dns,), daemon=True).start()
except OSError as error:
    sys.stderr.write("no DNS refusal on port 53: " + str(error) + chr(10))
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
