"""What every WebSocket meets before its consumer: the origin check, and the answer
for a path no consumer serves.

A browser sends its page's origin with every socket it opens, and the session cookie
with it whichever page opened it, so a socket is accepted only from the site's own
origin, by the rule Django's CSRF check applies to forms: the scheme, host and port
the socket itself was opened to (a host in ALLOWED_HOSTS), or an origin listed in
CSRF_TRUSTED_ORIGINS (``https://*.example.com`` covers its subdomains). Another port
of the same host is another site: ``http://127.0.0.1:9999`` may not open a socket on
``127.0.0.1:8000``."""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, urlsplit

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}
# The close code of a socket to a path nothing serves (docs/live_trace.md).
NO_SUCH_SOCKET = 4404

Origin = tuple[str, str, int]  # scheme, host, port


def parse_origin(text: str) -> Origin | None:
    """``scheme://host[:port]`` as a comparable triple (the default port filled in), or
    None for anything else (``null``, a path, a port out of range)."""
    try:
        parts: SplitResult = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path or parts.query or parts.username:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def own_origin(scope: dict[str, Any], headers: dict[bytes, bytes]) -> Origin | None:
    """The origin the socket was opened to: its Host header (which must be one of
    ALLOWED_HOSTS) with the scheme of the connection, or of the TLS proxy in front
    when SECURE_PROXY_SSL_HEADER says so, as Django decides ``is_secure``."""
    host = headers.get(b"host", b"").decode("latin-1")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") == "wss"
    proxy_header: tuple[str, str] | None = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header is not None:
        name, value = proxy_header
        asgi_name = name.removeprefix("HTTP_").replace("_", "-").lower().encode()
        secure = headers.get(asgi_name, b"").decode("latin-1").split(",")[0].strip() == value
    return parse_origin(f"{'https' if secure else 'http'}://{host}")


def trusted(origin: Origin, entries: list[str]) -> bool:
    """Whether CSRF_TRUSTED_ORIGINS lists ``origin``, exactly or by a ``*.`` pattern
    (the domain and its subdomains, on the pattern's scheme and port)."""
    scheme, host, port = origin
    for entry in entries:
        pattern = parse_origin(entry.replace("://*.", "://", 1))
        if pattern is None or pattern[0] != scheme or pattern[2] != port:
            continue
        if host == pattern[1] or ("://*." in entry and host.endswith(f".{pattern[1]}")):
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = dict(scope.get("headers", []))
    origin = parse_origin(headers.get(b"origin", b"").decode("latin-1"))
    if origin is None:
        return False  # a browser always sends one; a missing or opaque origin is nobody's
    return origin == own_origin(scope, headers) or trusted(origin, settings.CSRF_TRUSTED_ORIGINS)


class SameOriginSockets:
    """ASGI middleware: a socket from any other origin is refused at the handshake (403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


class NoSuchSocket(AsyncJsonWebsocketConsumer):
    """A path no consumer serves: accepted, told why, closed with 4404 (not the 500 a
    routing error would be), so a client does not retry it."""

    async def connect(self) -> None:
        await self.accept()
        await self.send_json({"type": "error", "error": f"there is no socket at {self.scope['path']}"})
        await self.close(code=NO_SUCH_SOCKET)
