"""A check's network: off unless its policy names destinations (``CheckDef.egress``),
and then only through a proxy in the worker, one per call.

Why a proxy of our own in the worker rather than squid or tinyproxy: the container
keeps ``network=none`` (under runsc, gVisor is registered with ``--network=none``, so
no network the engine could attach would reach it), and the only channel into such
a container is an execution's standard input and output. A relay beside the check
(sandbox/image/harness/relay.py) carries each connection over that channel to this proxy,
which therefore knows by construction which call every byte belongs to: no
per-call ports, credentials or log correlation, and nothing the check can reach but
the relay. squid would still need this relay, and would add a process to run and a
log to attribute after the fact.

Per connection the proxy reads one request head (``CONNECT host:port`` for a
tunnel, or a plain HTTP request with an absolute URL), then refuses, answering 403
with the reason, or connects from the worker and relays bytes both ways. Refused:
a raw address (names only; the container resolves nothing itself), a destination
not on the check's list, and a name that resolves to a link-local address (the cloud
metadata service at 169.254.169.254 and its IPv6 kin). A plain request is one
request: its Host header is the destination that was checked (the check's own is
dropped), a head a server could read as a different request is refused (folded
lines, Transfer-Encoding, a Content-Length that is not one number), and no byte
past its Content-Length is forwarded, so a second, pipelined request never reaches
the destination and the connection's event says so. Each connection is an
``EgressConnection`` event for the call when it ends, written once both directions
are over and counted (its byte counts are final), and the check's receipt carries
the summary per destination (``EgressSummary``) that its evidence keeps.

An agent's container (sandbox/agent) has forwards besides: ports on its loopback the
relay listens on, each sent to one destination the worker names (``Forward``: the
run's gateway), so a client that knows no proxy (Node's fetch) reaches it by a base
URL on 127.0.0.1. Each request on a forward is read like a plain one (one request a
connection, its Host the destination's, nothing past its body) and refused unless its
path is under the forward's prefix (the run's own gateway paths)."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core import events as ev
from core.policy import CheckDef
from sandbox.egress.protocol import CLOSE, DATA, DNS, FRAME, MAX_FRAME, OPEN, READY, RELAY
from sandbox.exec_stream import frames

log = logging.getLogger(__name__)

CONNECT_SECONDS = 10.0
READY_SECONDS = 20.0
MAX_HEAD = 64 * 1024
CHUNK = 64 * 1024
# Connection events per call before the rest are only counted (HARNESS_EGRESS_MAX_EVENTS_PER_CALL).
MAX_EVENTS = 200
# Dropped from a plain request before it leaves: they are for the proxy, and a
# connection is used for one request only (its destination was checked once). Host
# is the checked destination's, written by the proxy: the check's own could name
# another virtual host on the same address.
HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive", b"host")
PIPELINED = "a second request on the connection was not forwarded (one request per plain connection)"


class EgressRefused(Exception):
    """The proxy will not open this connection; the reason is the check's to read."""


@dataclass(frozen=True)
class Forward:
    """Where the connections to one of the relay's forward ports go: one destination
    set by the worker, never by the container, and the path every request sent there
    must be under (ending in ``/``)."""

    host: str
    port: int
    prefix: str = "/"

    def __post_init__(self) -> None:
        if not self.prefix.startswith("/") or not self.prefix.endswith("/") or not plain_path(self.prefix):
            raise ValueError(f"a forward's prefix must be a plain path ending in '/': {self.prefix!r}")


@dataclass
class Connection:
    cid: int
    # Set for a connection to a forward port: its destination is fixed.
    forward: Forward | None = None
    started: float = field(default_factory=time.monotonic)
    head: bytes = b""
    host: str = ""
    port: int = 0
    method: str = ""
    upstream: socket.socket | None = None
    # What is left of a plain request's body; None for a tunnel, whose bytes all go.
    body_left: int | None = None
    bytes_out: int = 0
    bytes_in: int = 0
    allowed: bool = False
    refused: str = ""
    # Why bytes of a connection let through were not forwarded (PIPELINED).
    cut: str = ""
    done: bool = False
    # Held across each send to the destination and its count, and taken by the end
    # before it reads the counts: a send the destination already answered is
    # counted before the event is written, however the threads are scheduled.
    sending: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # No more bytes go to the destination (the check closed, a send failed, the end).
    sent_all: bool = False


@dataclass(frozen=True)
class Request:
    method: str
    host: str
    port: int
    # What goes to the destination first: nothing for a tunnel, the rewritten head of
    # a plain request.
    forward: bytes
    # The length of a plain request's body (its Content-Length); None for a tunnel.
    body: int | None = None


def parse_head(head: bytes) -> Request:
    """The destination a request head asks for; raises EgressRefused for a head that
    is not a proxy request, or a plain one a server could read differently."""
    lines = head.split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise EgressRefused("not an HTTP proxy request")
    method, target, version = parts
    if method == "CONNECT":
        host, port = split_host_port(target, None)
        return Request(method, host, port, b"")
    if not target.lower().startswith("http://"):
        raise EgressRefused("a plain request must name an http:// URL (use CONNECT for https)")
    rest = target[len("http://") :]
    authority, slash, path = rest.partition("/")
    host, port = split_host_port(authority, 80)
    headers = [header_line(line) for line in lines[1:]]
    body = body_length(
        [value for name, value in headers if name == b"content-length"], [n for n, _ in headers if n == b"transfer-encoding"]
    )
    kept = [line for line, (name, _value) in zip(lines[1:], headers, strict=True) if name not in HOP_HEADERS]
    first = f"{method} /{path if slash else ''} {version}".encode("latin-1")
    named = f"Host: {host}{'' if port == 80 else f':{port}'}".encode("latin-1")
    return Request(method, host, port, b"\r\n".join([first, named, *kept, b"Connection: close", b"", b""]), body)


# What a forwarded request's path may not hold: an empty, "." or ".." segment, a
# backslash, a ";" (a path parameter) or an escaped dot, slash or backslash, in any
# case: a server could read such a path as one outside the prefix.
_UNPLAIN = re.compile(r"//|/\.\.?(/|$)|\\|;|%(2e|2f|5c)", re.IGNORECASE)


def plain_path(path: str) -> bool:
    return path.startswith("/") and path.isascii() and path.isprintable() and _UNPLAIN.search(path) is None


def forward_head(head: bytes, forward: Forward) -> Request:
    """A request on a forward port, sent to its destination in origin form with that
    destination as its Host and ``Connection: close``; refused unless its path is plain
    and under the forward's prefix, or when a server could read it differently (the
    rules of a plain proxy request)."""
    lines = head.split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise EgressRefused("not an HTTP/1 request")
    method, target, version = parts
    path = target.partition("?")[0]
    if not plain_path(path) or not path.startswith(forward.prefix):
        raise EgressRefused(f"{method} {target[:200]}: only plain paths under {forward.prefix} are forwarded")
    headers = [header_line(line) for line in lines[1:]]
    body = body_length(
        [value for name, value in headers if name == b"content-length"], [n for n, _ in headers if n == b"transfer-encoding"]
    )
    kept = [line for line, (name, _value) in zip(lines[1:], headers, strict=True) if name not in HOP_HEADERS]
    host = f"[{forward.host}]" if ":" in forward.host else forward.host
    named = f"Host: {host}:{forward.port}".encode("latin-1")
    first = f"{method} {target} {version}".encode("latin-1")
    return Request(method, forward.host, forward.port, b"\r\n".join([first, named, *kept, b"Connection: close", b"", b""]), body)


def header_line(line: bytes) -> tuple[bytes, bytes]:
    """(lowercase name, value) of a plain request's header line, refusing the forms
    servers disagree about: a folded continuation line and a name with spaces."""
    if line[:1] in (b" ", b"\t"):
        raise EgressRefused("a folded header line (obs-fold) is refused")
    name, colon, value = line.partition(b":")
    if not colon or not name or name != name.strip() or b" " in name:
        raise EgressRefused(f"a malformed header line is refused: {line[:80]!r}")
    return name.lower(), value.strip()


def body_length(lengths: list[bytes], encodings: list[bytes]) -> int:
    """How many bytes of body follow a plain request's head. Transfer-Encoding is
    refused, with or without a Content-Length: a server and this proxy could end the
    body at different bytes, and what follows would reach the server unchecked."""
    if encodings and lengths:
        raise EgressRefused("Transfer-Encoding and Content-Length together are refused")
    if encodings:
        raise EgressRefused("Transfer-Encoding on a plain request is refused: send a Content-Length (or use CONNECT)")
    if not lengths:
        return 0
    if len(set(lengths)) != 1 or not lengths[0].isdigit():
        raise EgressRefused(f"a Content-Length that is not one number is refused: {b', '.join(lengths)[:80]!r}")
    return int(lengths[0])


def split_host_port(authority: str, default: int | None) -> tuple[str, int]:
    host, colon, port_text = authority.rpartition(":")
    if not colon or "]" in port_text:
        host, port_text = authority, ""
    host = host.strip("[]").lower().rstrip(".")
    if not port_text:
        if default is None:
            raise EgressRefused(f"{authority!r} names no port")
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise EgressRefused(f"{authority!r} names no valid port")
    return host, int(port_text)


def check_destination(check: CheckDef, host: str, port: int) -> None:
    """Raise EgressRefused unless the check's policy names ``host:port``."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and address.is_link_local:
        raise EgressRefused(f"{host} is link-local (the cloud metadata service's range): never reachable from a check")
    if address is not None:
        raise EgressRefused(f"{host} is a raw address; checks reach hosts by name only")
    if not check.allows(host, port):
        raise EgressRefused(f"{host}:{port} is not on check {check.check_id}'s egress list")


def do_connect(host: str, port: int) -> socket.socket:
    """A connection from the worker to an allowed name, refused when the name
    resolves to a link-local address (the metadata service) rather than connected."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise EgressRefused(f"{host} does not resolve ({exc})") from None
    for *_info, address in infos:
        ip = ipaddress.ip_address(str(address[0]).split("%")[0])
        if ip.is_link_local or ip.is_unspecified or ip.is_multicast:
            raise EgressRefused(f"{host} resolves to {ip}, a link-local or unusable address")
    problem = "no address"
    for family, kind, proto, _name, address in infos:
        upstream = socket.socket(family, kind, proto)
        upstream.settimeout(CONNECT_SECONDS)
        try:
            upstream.connect(address)
        except OSError as exc:
            upstream.close()
            problem = str(exc)
            continue
        upstream.settimeout(None)
        return upstream
    raise EgressRefused(f"could not connect to {host}:{port} ({problem})")


class EgressProxy:
    """The proxy for one check call: ``start`` runs the relay in the call's container
    and gives the environment the check needs; ``close`` after the check ends every
    connection and returns what the check reached, per destination."""

    def __init__(
        self,
        check: CheckDef,
        record: Callable[[type[ev.Event], dict[str, Any]], None],
        max_events: int = MAX_EVENTS,
        forwards: Mapping[int, Forward] | None = None,
    ) -> None:
        self._check = check
        # The relay's forward ports (in the container) and where each one's connections go.
        self._forwards = dict(forwards or {})
        self._record = record
        # A check that opens thousands of connections (a crawler, a retry loop) must
        # not flood the run's log: past this many events per call, the rest are
        # counted and told in one EgressConnectionsOmitted when the call ends.
        self._max_events = max_events
        self._recorded = 0
        self._omitted = {"connections": 0, "allowed": 0, "refused": 0, "bytes_out": 0, "bytes_in": 0}
        self._conns: dict[int, Connection] = {}
        self._finished: list[Connection] = []
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._sock: Any = None
        self._raw: Any = None
        self._reader: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self.port: int | None = None

    def start(self, attach: Callable[[list[str]], Any]) -> dict[str, str]:
        """Start the relay through ``attach`` (an execution with its standard input
        open, ``SandboxContainer.attach``) and wait until it listens."""
        self._sock = attach(["python3", RELAY, *(str(port) for port in self._forwards)])
        self._raw = getattr(self._sock, "_sock", self._sock)
        ready = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(ready,), name="egress-relay", daemon=True)
        self._reader.start()
        if not ready.wait(READY_SECONDS) or self.port is None:
            self._shut()
            raise EgressRefused("the egress relay did not start in the sandbox")
        proxy = f"http://127.0.0.1:{self.port}"
        return {
            "HTTP_PROXY": proxy,
            "HTTPS_PROXY": proxy,
            "http_proxy": proxy,
            "https_proxy": proxy,
            "NO_PROXY": "",
            "no_proxy": "",
        }

    def close(self) -> list[ev.EgressSummary]:
        """After the check: the relay is gone with its processes (the wrapper kills
        them), so its stream ends; what is still open is ended and recorded."""
        if self._reader is not None:
            self._reader.join(5.0)
        self._shut()
        with self._lock:
            open_now = list(self._conns.values())
        for conn in open_now:
            if conn.upstream is not None:
                # Its destination thread wakes, ends it and writes its event.
                stop(conn.upstream)
        for thread in self._threads:
            thread.join(5.0)
        with self._lock:
            left = list(self._conns.values())
        for conn in left:
            self._end(conn)
        with self._lock:
            omitted = dict(self._omitted)
        if omitted["connections"]:
            self._record(ev.EgressConnectionsOmitted, {"check_id": self._check.check_id, "limit": self._max_events, **omitted})
        return summarise(self._finished)

    def _shut(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()

    # -- the relay's stream ------------------------------------------------------

    def _read(self, ready: threading.Event) -> None:
        buffer = b""
        try:
            for stream, data in frames(self._sock):
                if stream != 1:
                    log.warning("egress relay: %s", data[:500].decode(errors="replace"))
                    continue
                buffer += data
                while len(buffer) >= FRAME.size:
                    cid, kind, size = FRAME.unpack_from(buffer)
                    if size > MAX_FRAME:
                        log.warning("egress relay: a frame of %d bytes; the stream is dropped", size)
                        return
                    if len(buffer) < FRAME.size + size:
                        break
                    payload = buffer[FRAME.size : FRAME.size + size]
                    buffer = buffer[FRAME.size + size :]
                    self._frame(cid, kind, payload, ready)
        except OSError:
            pass  # the stream was closed under us: the check is over
        finally:
            ready.set()

    def _frame(self, cid: int, kind: int, payload: bytes, ready: threading.Event) -> None:
        if kind == READY and self.port is None:
            self.port = int(payload) if payload.isdigit() else None
            ready.set()
            return
        if kind == DNS:
            self._lookup(payload)
            return
        with self._lock:
            conn = self._conns.get(cid)
            if kind == OPEN and conn is None and cid not in {c.cid for c in self._finished}:
                # A port the worker did not name is no forward: its connection is a
                # proxy request like any other, checked against the policy.
                forward = self._forwards.get(int(payload)) if payload.isdigit() else None
                self._conns[cid] = Connection(cid, forward=forward)
                return
        if conn is None:
            return
        if kind == DATA:
            self._from_check(conn, payload)
        elif kind == CLOSE:
            if conn.upstream is None:
                self._end(conn)  # closed before a whole request: it went nowhere
            else:
                with conn.sending:
                    conn.sent_all = True
                with contextlib.suppress(OSError):
                    conn.upstream.shutdown(socket.SHUT_WR)

    def _lookup(self, query: bytes) -> None:
        """A name the check tried to resolve itself: refused (the relay answered
        REFUSED) and recorded like a connection refused, its port 53."""
        conn = Connection(0, host=dns_name(query) or "?", port=53, method="DNS", bytes_out=len(query))
        self._end(conn, "names resolve only through the proxy: a check's own DNS lookup is refused")

    def _from_check(self, conn: Connection, data: bytes) -> None:
        if conn.upstream is not None:
            self._send_out(conn, conn.upstream, data)
            return
        conn.head += data
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.head) > MAX_HEAD:
                self._refuse(conn, "the request head is too long")
            return
        head, rest = conn.head[:end], conn.head[end + 4 :]
        try:
            if conn.forward is not None:
                conn.host, conn.port = conn.forward.host, conn.forward.port
                request = forward_head(head, conn.forward)
                conn.method = request.method
            else:
                request = parse_head(head)
                conn.host, conn.port, conn.method = request.host, request.port, request.method
                check_destination(self._check, request.host, request.port)
            conn.upstream = do_connect(request.host, request.port)
        except EgressRefused as exc:
            self._refuse(conn, str(exc))
            return
        if request.method == "CONNECT":
            self._to_check(conn.cid, DATA, b"HTTP/1.1 200 Connection established\r\n\r\n")
        if request.body is not None and len(rest) > request.body:
            # Known before a byte goes out: the destination may answer, and its thread
            # end the connection and write its event, before this thread gets to the rest.
            conn.cut = PIPELINED
        thread = threading.Thread(target=self._from_destination, args=(conn,), name=f"egress-{conn.cid}", daemon=True)
        self._threads.append(thread)
        thread.start()
        self._send_out(conn, conn.upstream, request.forward)
        conn.body_left = request.body
        self._from_check(conn, rest)

    def _send_out(self, conn: Connection, upstream: socket.socket, data: bytes) -> None:
        """Bytes from the check to its destination, counted as the socket takes them.
        Of a plain request, only its body: what follows it is another request."""
        with conn.sending:
            if conn.sent_all:
                return
            if conn.body_left is not None:
                data, extra = data[: conn.body_left], data[conn.body_left :]
                conn.body_left -= len(data)
                if extra:
                    conn.cut = PIPELINED
                    conn.sent_all = True
            view = memoryview(data)
            try:
                while view:
                    sent = upstream.send(view)
                    conn.bytes_out += sent
                    view = view[sent:]
                return
            except OSError:
                conn.sent_all = True
        stop(upstream)  # the destination is gone: its thread ends the connection

    def _from_destination(self, conn: Connection) -> None:
        """The destination's bytes to the check; when they end, so does the
        connection, and this thread, the last one on it, writes its event."""
        upstream = conn.upstream
        assert upstream is not None
        try:
            while True:
                data = upstream.recv(CHUNK)
                if not data:
                    break
                conn.bytes_in += len(data)
                self._to_check(conn.cid, DATA, data)
        except OSError:
            pass
        self._end(conn)

    def _to_check(self, cid: int, kind: int, data: bytes = b"") -> None:
        # The lock keeps each frame whole between the threads sending on the one
        # socket; an OSError means the relay is gone with the check.
        with self._send_lock, contextlib.suppress(OSError):
            self._raw.sendall(FRAME.pack(cid, kind, len(data)) + data)

    def _refuse(self, conn: Connection, reason: str) -> None:
        body = f"Harness egress refused: {reason}\n".encode()
        answer = b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        self._to_check(conn.cid, DATA, answer + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self._end(conn, reason)

    def _end(self, conn: Connection, refused: str | None = None) -> None:
        """The connection's end, recorded once (an end from each side may race), with
        final counts: a send under way finishes and is counted first."""
        with conn.sending:
            conn.sent_all = True
        with self._lock:
            if conn.done:
                return
            conn.done = True
            self._conns.pop(conn.cid, None)
            self._finished.append(conn)
            conn.allowed = refused is None
            conn.refused = refused or ""
        if conn.upstream is not None:
            conn.upstream.close()
        self._to_check(conn.cid, CLOSE)
        if not conn.host and refused is None:
            return  # no request came: there is no destination to record
        with self._lock:
            over = self._recorded >= self._max_events
            if over:
                self._omitted["connections"] += 1
                self._omitted["allowed" if refused is None else "refused"] += 1
                self._omitted["bytes_out"] += conn.bytes_out
                self._omitted["bytes_in"] += conn.bytes_in
            else:
                self._recorded += 1
        if over:
            return
        self._record(
            ev.EgressConnection,
            {
                "check_id": self._check.check_id,
                "host": conn.host,
                "port": conn.port,
                "allowed": refused is None,
                "reason": refused or conn.cut,
                "method": conn.method or "?",
                "bytes_out": conn.bytes_out,
                "bytes_in": conn.bytes_in,
                "duration_ms": int((time.monotonic() - conn.started) * 1000),
            },
        )


def stop(upstream: socket.socket) -> None:
    """Both directions of a destination's socket shut: a thread blocked reading it
    wakes (closing it would not wake it)."""
    with contextlib.suppress(OSError):
        upstream.shutdown(socket.SHUT_RDWR)


def dns_name(query: bytes) -> str:
    """The name a DNS query asks about (its first question), "" when it cannot be read."""
    labels: list[str] = []
    at = 12
    while at < len(query) and query[at] and len(labels) < 128:
        size = query[at]
        if size > 63:
            return ""  # a pointer or a reserved form: no query of a resolver's uses one here
        labels.append(query[at + 1 : at + 1 + size].decode("ascii", "replace"))
        at += 1 + size
    return ".".join(labels)[:253]


def summarise(conns: list[Connection]) -> list[ev.EgressSummary]:
    """Per destination asked for, in the order first asked: allowed if any of its
    connections was let through."""
    totals: dict[tuple[str, int], dict[str, Any]] = {}
    for conn in conns:
        if not conn.host:
            continue
        entry = totals.setdefault(
            (conn.host, conn.port),
            {"host": conn.host, "port": conn.port, "allowed": False, "connections": 0, "bytes_out": 0, "bytes_in": 0, "reason": ""},
        )
        entry["allowed"] = entry["allowed"] or conn.allowed
        entry["reason"] = "" if entry["allowed"] else entry["reason"] or conn.refused
        entry["connections"] += 1
        entry["bytes_out"] += conn.bytes_out
        entry["bytes_in"] += conn.bytes_in
    return [ev.EgressSummary.model_validate(entry) for entry in totals.values()]
