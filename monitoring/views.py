"""GET /metrics, for Prometheus (docs/deploy.md, Metrics)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from monitoring.scrape import check_scraper, scrape


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not check_scraper(request.headers.get("Authorization", ""), request.META.get("REMOTE_ADDR", "")):
        response = HttpResponse("metrics: a bearer token or an allowed network is required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(scrape(with_runs=True), content_type=CONTENT_TYPE_LATEST)
