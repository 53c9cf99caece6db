"""Sockets on the real ASGI server (daphne) are accepted only from the site's own
origin, scheme, host and port compared (another port of the same host is another
site; channels' check looked at the host name alone), or from CSRF_TRUSTED_ORIGINS;
behind a TLS proxy the origin is https. A path no consumer serves is closed 4404
with a message, not a 500."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from harness_site.sockets import parse_origin, trusted
from tests.fixtures_web import AsgiServer, free_port

pytestmark = pytest.mark.django_db(transaction=True)


def opened(server: AsgiServer, path: str, headers: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    """(the close code, the messages before it) of a socket the server accepted;
    (the handshake's HTTP status, []) of one it refused."""
    try:
        socket = connect(f"ws://127.0.0.1:{server.port}{path}", additional_headers=headers, open_timeout=20, legacy=True)
    except InvalidStatus as refused:
        return refused.response.status_code, []
    messages = []
    try:
        while True:
            messages.append(json.loads(socket.recv(timeout=20)))
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else 1006), messages


def test_it_accepts_a_socket_only_from_the_sites_own_origin(live_server_asgi: AsgiServer) -> None:
    server = live_server_asgi
    own = server.url  # http://127.0.0.1:<port>
    # Accepted: the lists socket then closes 4401 for want of a session.
    assert opened(server, "/ws/lists/", {"Origin": own})[0] == 4401
    assert opened(server, "/ws/lists/", {"Origin": f"{own}/"})[0] == 403  # an origin has no path
    for foreign in (
        f"http://127.0.0.1:{free_port()}",  # another port: another site (was accepted)
        f"https://127.0.0.1:{server.port}",  # another scheme
        f"http://localhost:{server.port}",  # in ALLOWED_HOSTS, but not the host the socket was opened to
        "http://127.0.0.1",
        "http://evil.example",
        "null",
    ):
        assert opened(server, "/ws/lists/", {"Origin": foreign}) == (403, []), foreign
    assert opened(server, "/ws/lists/", {}) == (403, [])  # no origin at all
    # CSRF_TRUSTED_ORIGINS admits its origins, as it does for forms.
    assert opened(server, "/ws/lists/", {"Origin": "http://localhost:8000"})[0] == 4401


def test_it_takes_the_origin_behind_a_tls_proxy_as_https(transactional_db: None, tmp_path: Path) -> None:
    server = AsgiServer(tmp_path, HARNESS_BEHIND_TLS_PROXY="1")
    server.start()
    try:
        host = f"127.0.0.1:{server.port}"
        assert opened(server, "/ws/lists/", {"Origin": f"https://{host}", "X-Forwarded-Proto": "https"})[0] == 4401
        assert opened(server, "/ws/lists/", {"Origin": f"http://{host}", "X-Forwarded-Proto": "https"})[0] == 403
        assert opened(server, "/ws/lists/", {"Origin": f"https://{host}"})[0] == 403  # a plain connection
    finally:
        server.stop()


def test_it_closes_a_socket_to_an_unknown_path_with_4404(live_server_asgi: AsgiServer) -> None:
    server = live_server_asgi
    for path in ("/ws/nothing/", "/ws/runs/not-a-run-id/", "/"):
        code, messages = opened(server, path, {"Origin": server.url})
        assert code == 4404 and messages == [{"type": "error", "error": f"there is no socket at {path}"}], (path, code, messages)
    # A foreign origin is refused before any path is looked at.
    assert opened(server, "/ws/nothing/", {"Origin": "http://evil.example"}) == (403, [])
    assert "Traceback" not in server.log() and "No route found" not in server.log()


def test_it_compares_origins_by_scheme_host_and_port() -> None:
    assert parse_origin("http://Example.COM") == ("http", "example.com", 80)
    assert parse_origin("https://[::1]:8443") == ("https", "::1", 8443)
    assert parse_origin("http://h:99999") is None and parse_origin("ftp://h") is None and parse_origin("http://u@h") is None
    entries = ["https://*.example.com", "http://ci.internal:8080"]
    assert trusted(("https", "a.b.example.com", 443), entries) and trusted(("https", "example.com", 443), entries)
    assert not trusted(("https", "badexample.com", 443), entries)
    assert not trusted(("http", "a.example.com", 80), entries)  # the pattern's scheme and port
    assert trusted(("http", "ci.internal", 8080), entries) and not trusted(("http", "ci.internal", 80), entries)
