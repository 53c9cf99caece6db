"""The trials' Celery tasks: a rule's or a script's decision on a request (again
shortly while the run has not yet begun waiting on it) and a look at a trial once a
run of it stopped."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(name="trials.review", bind=True, max_retries=120)
def review(self: Any, request_id: str) -> str:
    from trials.service import review as decide

    said = decide(str(request_id))
    if said == "later":
        raise self.retry(countdown=0.5)
    return said


@shared_task(name="trials.tend")
def tend_trial(trial_id: int) -> str:
    from trials.models import Trial
    from trials.service import tend

    trial = Trial.objects.filter(pk=trial_id).first()
    return tend(trial).status if trial is not None else "gone"


@shared_task(name="trials.delete_expired_remotes")
def delete_expired_remotes() -> int:
    from django.conf import settings
    from django.utils import timezone

    from trials.remotes import delete_expired_remotes as delete

    return len(delete(settings.HARNESS_ARTIFACT_RETENTION_DAYS, timezone.now()))
