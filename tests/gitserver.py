"""A real git server on loopback for tests: ``git http-backend`` (git's own smart
HTTP, run as CGI per request) behind a small threaded HTTP server with basic auth
and push enabled, and a fault proxy in front of it that can forward a push and
then drop the connection before the answer.

Nothing here imitates git: every byte of the protocol is produced by git."""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

USER = "harness-bot"
TOKEN = "tok-3f9a1c-loopback-secret"
HOOK_MESSAGE = "protected: branches under harness/ need a ticket number"


def sh(*args: str, cwd: Path | None = None, stdin: str | None = None) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    env.update(GIT_AUTHOR_NAME="Dev", GIT_AUTHOR_EMAIL="dev@example.com", GIT_COMMITTER_NAME="Dev", GIT_COMMITTER_EMAIL="dev@example.com")
    done = subprocess.run(["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_bare_repository(root: Path, name: str = "shop.git") -> dict[str, str]:
    """A bare repository with ``main`` (two commits), a ``feature`` branch and a tag
    ``v1`` on the first commit; returns their commits."""
    bare = root / name
    sh("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    sh("config", "http.receivepack", "true", cwd=bare)
    # Every branch update is logged, so a test can count them.
    sh("config", "core.logAllRefUpdates", "always", cwd=bare)
    work = root / f"{name}-work"
    sh("init", "--quiet", "--initial-branch=main", str(work))
    (work / "README.md").write_text("# Shop\n")
    (work / "total.py").write_text("def total(prices):\n    return sum(prices)\n")
    sh("add", "-A", cwd=work)
    sh("commit", "--quiet", "-m", "First", cwd=work)
    first = sh("rev-parse", "HEAD", cwd=work)
    sh("tag", "v1", cwd=work)
    (work / "total.py").write_text("def total(prices):\n    return round(sum(prices), 2)\n")
    sh("commit", "--quiet", "-am", "Round totals", cwd=work)
    main = sh("rev-parse", "HEAD", cwd=work)
    sh("checkout", "--quiet", "-b", "feature", first, cwd=work)
    (work / "feature.txt").write_text("wip\n")
    sh("add", "-A", cwd=work)
    sh("commit", "--quiet", "-m", "Feature", cwd=work)
    feature = sh("rev-parse", "HEAD", cwd=work)
    sh("push", "--quiet", str(bare), "main", "feature", "v1", cwd=work)
    return {"first": first, "main": main, "feature": feature, "path": str(bare)}


def make_orders_remote(root: Path, name: str) -> Path:
    """A bare repository holding examples/orders on ``main`` (what the demo script
    changes), as examples/remote/make_remote.sh makes it."""
    bare = root / name
    sh("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    sh("config", "http.receivepack", "true", cwd=bare)
    sh("config", "core.logAllRefUpdates", "always", cwd=bare)
    work = root / f"{name}-work"
    shutil.copytree(
        Path(__file__).resolve().parent.parent / "examples" / "orders", work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache")
    )
    sh("init", "--quiet", "--initial-branch=main", cwd=work)
    sh("add", "-A", cwd=work)
    sh("commit", "--quiet", "-m", "Orders: totals with discounts", cwd=work)
    sh("push", "--quiet", str(bare), "main", cwd=work)
    return bare


def reject_pushes(bare: Path) -> None:
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho '{HOOK_MESSAGE}' >&2\nexit 1\n")
    hook.chmod(0o755)


class GitHttpServer:
    """Smart HTTP for every repository under ``root``, basic auth required."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pushes: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.serve(self)

            def do_POST(self) -> None:
                server.serve(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def serve(self, req: BaseHTTPRequestHandler) -> None:
        expected = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()
        if req.headers.get("Authorization") != expected:
            req.send_response(401)
            req.send_header("WWW-Authenticate", 'Basic realm="git"')
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        body = read_body(req)
        path, _, query = req.path.partition("?")
        if req.command == "POST" and path.endswith("/git-receive-pack"):
            self.pushes.append(path)
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": req.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": req.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": USER,
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": req.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": req.headers.get("Content-Encoding", ""),
            "HOME": "/nonexistent",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = done.stdout.partition(b"\n\n")
        headers = [line.split(":", 1) for line in head.decode().splitlines() if ":" in line]
        status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
        req.send_response(status)
        for key, value in headers:
            if key.lower() != "status":
                req.send_header(key, value.strip())
        req.send_header("Content-Length", str(len(payload)))
        req.end_headers()
        req.wfile.write(payload)


def read_body(req: BaseHTTPRequestHandler) -> bytes:
    if req.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(req.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                req.rfile.readline()
                return b"".join(chunks)
            chunks.append(req.rfile.read(size))
            req.rfile.readline()
    return req.rfile.read(int(req.headers.get("Content-Length") or 0))


class FaultProxy:
    """Forwards everything to ``upstream``; while ``drop_push_answer`` is set, a push
    is forwarded in full (the server applies it) and the connection is then closed
    without the server's answer, as a dropped connection or a timeout would."""

    def __init__(self, upstream: GitHttpServer) -> None:
        self.drop_push_answer = False
        # Before dropping, hold the connection this long (a client's timeout fires first).
        self.hold_seconds = 0.0
        # The next this many requests fail without reaching the server: answered with
        # a 503, or ("reset") the connection closed at once.
        self.fail_requests = 0
        self.fail_with: int | str = 503
        # Every request's path, in order (what a client tried).
        self.seen: list[str] = []
        # Set while a push is being forwarded (it has reached the proxy, not yet its answer).
        self.push_arrived = threading.Event()
        # While set, a push is held at the proxy before it is forwarded.
        self.hold_push = threading.Event()
        # A push released from the hold is dropped instead of forwarded.
        self.discard_push = False
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self, upstream)

            def do_POST(self) -> None:
                proxy.forward(self, upstream)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def forward(self, req: BaseHTTPRequestHandler, upstream: GitHttpServer) -> None:
        body = read_body(req)
        self.seen.append(req.path)
        if self.fail_requests > 0:
            self.fail_requests -= 1
            if self.fail_with == "reset":
                req.close_connection = True
                return
            req.send_response(int(self.fail_with))
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        pushing = req.command == "POST" and req.path.endswith("/git-receive-pack")
        if pushing:
            self.push_arrived.set()
            while self.hold_push.is_set():
                time.sleep(0.05)
            if self.discard_push:
                # The push never reaches the server; the client sees the connection end.
                req.close_connection = True
                return
        headers = {k: v for k, v in req.headers.items() if k.lower() not in ("host", "transfer-encoding", "content-length", "connection")}
        conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=60)
        conn.request(req.command, req.path, body=body if req.command == "POST" else None, headers=headers)
        answer = conn.getresponse()
        payload = answer.read()
        conn.close()
        if self.drop_push_answer and req.command == "POST" and req.path.endswith("/git-receive-pack"):
            time.sleep(self.hold_seconds)
            req.close_connection = True
            return
        req.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                req.send_header(key, value)
        req.send_header("Content-Length", str(len(payload)))
        req.end_headers()
        try:
            req.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            req.close_connection = True  # the client is gone (a test killed it)


@contextmanager
def serving(*servers: GitHttpServer | FaultProxy) -> Iterator[None]:
    for server in servers:
        server.thread.start()
    try:
        yield
    finally:
        for server in servers:
            server.httpd.shutdown()
            server.httpd.server_close()
