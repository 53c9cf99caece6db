"""Content-Security-Policy on every response. Pages load scripts and styles only
from our own static files, so markup that slipped into tool output cannot run."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # A view with a stricter policy of its own (e.g. raw downloads) keeps it.
        response.headers.setdefault("Content-Security-Policy", settings.HARNESS_CSP)
        return response
