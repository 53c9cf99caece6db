"""Recording deliveries when an event calls for one, and attempting them.

A delivery row is written in the same transaction as its event, so a notification
is never lost to a crash or a broker outage between the two; the Celery task only
sends. An attempt first claims the row with a conditional UPDATE (a short lease),
so a redelivered or duplicated task message never sends twice at once."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

import certifi
import urllib3
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from common.metrics import DELIVERIES_FAILED
from common.redact import redact
from notifications import messages
from notifications.destinations import Destination, DestinationRefused, DestinationUnresolved, check_destination
from notifications.models import Delivery, DeliveryAttempt, WebhookEndpoint
from runs.models import Event

log = logging.getLogger(__name__)
ERROR_CHARS = 2000
# A scheduled retry may be handed to a worker a moment before the time recorded
# for it (both are computed from slightly different clocks).
EARLY_SECONDS = 2.0
USER_AGENT = "Harness-Webhooks/1"


def record_deliveries(event: Event) -> list[str]:
    """Delivery rows for every active endpoint that wants this event (site-wide, or of
    the event's run's project); their ids."""
    kind = messages.kind_of(event.typed())
    if kind is None:
        return []
    run = event.run
    # Site-wide endpoints and the run's project's own: never another project's.
    wanted = WebhookEndpoint.objects.filter(Q(project__isnull=True) | Q(project_id=run.project_id), active=True)
    endpoints = [e for e in wanted if kind in e.event_kinds]
    if not endpoints:
        return []
    run_facts = {"id": str(run.pk), "task_id": run.task_id, "objective": run.objective}
    now = timezone.now()
    rows = []
    for endpoint in endpoints:
        delivery_id = uuid.uuid4()
        body = messages.notice(
            delivery_id=str(delivery_id),
            kind=kind,
            run=run_facts,
            event=event.as_dict(),
            base_url=settings.HARNESS_PUBLIC_URL,
        )
        if endpoint.format == WebhookEndpoint.Format.SLACK:
            body = messages.slack(body)
        rows.append(Delivery(id=delivery_id, endpoint=endpoint, event=event, kind=kind, payload=redact(body), next_retry_at=now))
    Delivery.objects.bulk_create(rows)
    return [str(row.id) for row in rows]


@dataclass(frozen=True)
class Outcome:
    status: str  # delivered | failed | retry | not_due
    retry_in: float | None = None


def attempt(delivery_id: str) -> Outcome:
    """Send a due delivery once and record how it went."""
    delivery = claim(delivery_id)
    if delivery is None:
        return Outcome("not_due")
    raw_body = messages.encode(delivery.payload)
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Harness-Delivery": str(delivery.pk),
        "X-Harness-Event": delivery.kind,
        "X-Harness-Timestamp": timestamp,
        "X-Harness-Signature": messages.signature(delivery.endpoint.secret, timestamp, raw_body),
    }
    started = time.monotonic()
    try:
        # Checked again at every attempt: the name may resolve elsewhere since the form.
        destination = check_destination(delivery.endpoint.url)
    except DestinationRefused as exc:
        return record_attempt(delivery, None, f"refused: {exc}", 0, final=True)
    except DestinationUnresolved as exc:
        return record_attempt(delivery, None, str(exc), int((time.monotonic() - started) * 1000))
    status_code, error = post(destination, raw_body, headers)
    return record_attempt(delivery, status_code, error, int((time.monotonic() - started) * 1000))


def claim(delivery_id: str) -> Delivery | None:
    now = timezone.now()
    lease_until = now + timedelta(seconds=settings.HARNESS_WEBHOOK_TIMEOUT_SECONDS + 30)
    claimed = Delivery.objects.filter(
        pk=delivery_id,
        status=Delivery.Status.PENDING,
        next_retry_at__lte=now + timedelta(seconds=EARLY_SECONDS),
    ).update(next_retry_at=lease_until)
    if not claimed:
        return None
    return Delivery.objects.select_related("endpoint").get(pk=delivery_id)


def post(destination: Destination, raw_body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
    """(status code, error). The connection goes to the address that was checked (no
    second lookup of the name); TLS still verifies the certificate for the name.
    Redirects are not followed (the signed request goes only where the admin said),
    and the response body is never read or kept: a receiver's answer is not ours to
    store or show (it would make webhooks a way to read internal services)."""
    host = f"[{destination.host}]" if ":" in destination.host else destination.host
    default_port = 443 if destination.scheme == "https" else 80
    pool: urllib3.HTTPConnectionPool
    if destination.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            destination.address,
            destination.port,
            server_hostname=destination.host,
            assert_hostname=destination.host,
            cert_reqs="CERT_REQUIRED",
            ca_certs=certifi.where(),
        )
    else:
        pool = urllib3.HTTPConnectionPool(destination.address, destination.port)
    host_header = host if destination.port == default_port else f"{host}:{destination.port}"
    try:
        with pool:
            response = pool.urlopen(
                "POST",
                destination.target,
                body=raw_body,
                headers={**headers, "Host": host_header},
                redirect=False,
                retries=False,
                timeout=urllib3.Timeout(total=settings.HARNESS_WEBHOOK_TIMEOUT_SECONDS),
                preload_content=False,
            )
            response.release_conn()
            return response.status, ""
    except urllib3.exceptions.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]


def record_attempt(delivery: Delivery, status_code: int | None, error: str, duration_ms: int, final: bool = False) -> Outcome:
    """Record an attempt: its status code (or error) and how long it took; ``final``
    when asking again cannot help (a refused destination)."""
    now = timezone.now()
    number = delivery.attempts + 1
    ok = status_code is not None and 200 <= status_code < 300
    retry_in = None
    if ok:
        status, outcome = Delivery.Status.DELIVERED, "delivered"
    elif not final and messages.retryable(status_code) and number < settings.HARNESS_WEBHOOK_MAX_ATTEMPTS:
        retry_in = messages.backoff_seconds(number, settings.HARNESS_WEBHOOK_RETRY_BASE_SECONDS, settings.HARNESS_WEBHOOK_RETRY_MAX_SECONDS)
        status, outcome = Delivery.Status.PENDING, "retry"
    else:
        status, outcome = Delivery.Status.FAILED, "failed"
    with transaction.atomic():
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=number,
            at=now,
            status_code=status_code,
            error=error,
            duration_ms=duration_ms,
        )
        Delivery.objects.filter(pk=delivery.pk).update(
            status=status,
            attempts=number,
            status_code=status_code,
            last_error=error,
            next_retry_at=now + timedelta(seconds=retry_in) if retry_in is not None else None,
            delivered_at=now if ok else None,
        )
    if status == Delivery.Status.FAILED:
        DELIVERIES_FAILED.labels("webhook").inc()
    if not ok:
        log.warning("webhook %s to %s: attempt %d got %s", delivery.pk, delivery.endpoint.url, number, status_code or error)
    return Outcome(outcome, retry_in)


def overdue(grace_seconds: float) -> list[str]:
    """Pending deliveries whose send or retry should have happened a while ago: the
    task message was lost (broker down at commit) or its worker died mid-attempt."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    return [
        str(pk) for pk in Delivery.objects.filter(status=Delivery.Status.PENDING, next_retry_at__lte=cutoff).values_list("pk", flat=True)
    ]
