"""ASGI entry point (Daphne): HTTP for the pages, WebSockets for the live trace.

Sockets are accepted only from the site's own origin (harness_site.sockets: a page
on another site, another port included, cannot ride the reviewer's session) and
carry the Django session for the user; a path no consumer serves is closed 4404."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")

# Django must be set up before the consumers (and their models) are imported.
django_http = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import get_resolver, path, re_path  # noqa: E402

from core import visible  # noqa: E402
from gateway.mcp_endpoint import mcp_service  # noqa: E402
from gateway.model_proxy import services as model_services  # noqa: E402
from gateway.routing import gateway  # noqa: E402
from harness_site.sockets import NoSuchSocket, SameOriginSockets  # noqa: E402
from live.consumers import RunTraceConsumer  # noqa: E402
from live.lists import ListsConsumer  # noqa: E402

websocket_urls = [
    path("ws/runs/<uuid:run_id>/", RunTraceConsumer.as_asgi()),
    path("ws/lists/", ListsConsumer.as_asgi()),
    re_path(r"", NoSuchSocket.as_asgi()),  # last: every other path
]

application = ProtocolTypeRouter(
    {
        # The agents' gateway (/agent/...) beside the site: an MCP call that waits for a
        # reviewer is a coroutine, not one of Django's threads.
        "http": gateway(
            {"mcp": mcp_service, **model_services()}, ASGIStaticFilesHandler(django_http) if settings.HARNESS_SERVE_STATIC else django_http
        ),
        "websocket": SameOriginSockets(AuthMiddlewareStack(URLRouter(websocket_urls))),
    }
)

# Everything loaded by now lives as long as the process. Frozen, it is left out of the
# collector's full passes, which otherwise walk all of it (about 150,000 objects: 100 ms
# on a 2-core VM, more under load) and stall every live socket at once, the largest
# single delay in the live trace's tail. The URL patterns load first so the first
# request does not import them and they are frozen too.
get_resolver().url_patterns  # noqa: B018 - loaded for the side effect
# Likewise the patterns of hidden characters the trace marks in every event it presents
# (core.visible: a pass over every code point, 0.16 s, more under load), else built by
# the first feed's first read with the interpreter's lock held: every live socket
# stalled behind it, the worst tail of the first viewers a process serves.
visible.prepare()
gc.freeze()
