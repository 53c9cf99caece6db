"""Celery tasks: sending a delivery (retried with exponential backoff) and the
beat's sweep for deliveries whose task message was lost."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.utils import timezone

from notifications import mail, services
from notifications.models import Mail

log = logging.getLogger(__name__)
SWEEP_GRACE_SECONDS = 60.0


# Each retry is a new task message with a countdown; services.attempt claims the
# row first, so a message the broker redelivers early is a no-op.
@shared_task(name="notifications.deliver", bind=True, acks_late=True, max_retries=None)
def deliver(self: Any, delivery_id: str) -> str:
    outcome = services.attempt(delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.status


def enqueue(delivery_id: str) -> None:
    """Hand a delivery to a worker. If the broker is unreachable the row is still
    there and the sweep sends it."""
    try:
        deliver.delay(delivery_id)
    except Exception:  # the database holds the delivery; the sweep retries
        log.warning("could not enqueue webhook delivery %s", delivery_id, exc_info=True)


@shared_task(name="notifications.sweep")
def sweep() -> int:
    due = services.overdue(SWEEP_GRACE_SECONDS)
    for delivery_id in due:
        enqueue(delivery_id)
    return len(due)


@shared_task(name="notifications.send_mail", bind=True, acks_late=True, max_retries=None)
def send_mail(self: Any, mail_id: str) -> str:
    outcome = mail.attempt(mail_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.status


def enqueue_mail(mail_id: str) -> None:
    """Hand a mail to a worker for its time (a digest waits for more requests)."""
    send_after = Mail.objects.filter(pk=mail_id).values_list("send_after", flat=True).first()
    countdown = max(0.0, (send_after - timezone.now()).total_seconds()) if send_after else 0.0
    try:
        send_mail.apply_async((mail_id,), countdown=countdown)
    except Exception:  # the database holds the mail; the sweep sends it
        log.warning("could not enqueue mail %s", mail_id, exc_info=True)


@shared_task(name="notifications.remind")
def remind() -> int:
    """Reminders of requests that expire soon, and every mail whose time has come
    without its task (a lost message)."""
    new = mail.record_reminders()
    for mail_id in [*new, *mail.due()]:
        send_mail.delay(mail_id)
    return len(new)
