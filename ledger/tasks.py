"""The beat's work for the ledger: publishing its head, forgetting old content."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from ledger.export import forget_shown_content
from ledger.publish import publish


@shared_task(name="ledger.publish_head")
def publish_head() -> dict[str, Any]:
    published = publish()
    forget_shown_content()
    return published
