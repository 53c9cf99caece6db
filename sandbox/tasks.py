from celery import shared_task
from django.conf import settings

from runs.models import Run
from sandbox.container import sweep_orphans


@shared_task(name="sandbox.sweep")
def sweep() -> list[str]:
    """Remove containers whose run is not being driven (its worker died, or it ended)."""
    active = Run.objects.filter(status=Run.Status.RUNNING, lease_expires_at__isnull=False)
    return sweep_orphans({str(pk) for pk in active.values_list("pk", flat=True)}, scope=settings.SANDBOX_SCOPE)
