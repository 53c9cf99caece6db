from celery import shared_task

from approvals.services import expire_due


@shared_task(name="approvals.expire")
def expire() -> int:
    return expire_due()
