"""Run leases: exactly one worker drives a run. Claims are conditional UPDATEs
whose row count says who won; the token increments on every claim and fences
the loser's later writes (see DjangoStore)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from common.metrics import LEASE_TAKEOVERS
from runs.models import Run


def acquire(run_id: str, owner: str, seconds: int | None = None, *, idle_seconds: float = 0) -> int | None:
    """Claim the run if nobody holds a live lease (nor has, for ``idle_seconds``);
    return the new fencing token."""
    now = timezone.now()
    ttl = timedelta(seconds=seconds or settings.HARNESS_LEASE_SECONDS)
    claim = {"lease_owner": owner, "lease_expires_at": now + ttl, "lease_token": F("lease_token") + 1}
    # The UPDATE and the read of the token it wrote must see the same row version.
    with transaction.atomic():
        # A lease nobody holds first; only if there is none, one that ran out: that
        # claim is a takeover from a worker that stalled or died (counted), and the
        # common claim stays one statement.
        if Run.objects.filter(pk=run_id, lease_expires_at__isnull=True).update(**claim) != 1:
            if Run.objects.filter(pk=run_id).filter(lease_free(idle_seconds)).update(**claim) != 1:
                return None
            LEASE_TAKEOVERS.inc()
        return int(Run.objects.filter(pk=run_id).values_list("lease_token", flat=True).get())


def renew(run_id: str, token: int, seconds: int | None = None) -> bool:
    ttl = timedelta(seconds=seconds or settings.HARNESS_LEASE_SECONDS)
    return Run.objects.filter(pk=run_id, lease_token=token).update(lease_expires_at=timezone.now() + ttl) == 1


def release(run_id: str, token: int) -> bool:
    return Run.objects.filter(pk=run_id, lease_token=token).update(lease_owner="", lease_expires_at=None) == 1


def lease_free(idle_seconds: float = 0) -> Q:
    """Nobody drives the run: never leased, released, or the holder's lease ran out
    (at least ``idle_seconds`` ago)."""
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=timezone.now() - timedelta(seconds=idle_seconds))


def expired_active_runs() -> list[str]:
    """Runs that should be moving but whose driver is gone: a lease that ran out, or
    a run never claimed for several lease periods (its start message died with a
    worker). The latter are touched so each is re-sent at most once per period."""
    now = timezone.now()
    stale_after = timedelta(seconds=3 * settings.HARNESS_LEASE_SECONDS)
    # A queued run is not moving on purpose: its project's queue starts it.
    running = Run.objects.filter(status=Run.Status.RUNNING, queued=False)
    dropped = running.filter(lease_expires_at__lte=now) | running.filter(lease_expires_at__isnull=True, lease_token__gt=0)
    unclaimed = running.filter(lease_token=0, updated_at__lte=now - stale_after)
    unclaimed_ids = list(unclaimed.values_list("pk", flat=True))
    Run.objects.filter(pk__in=unclaimed_ids, lease_token=0).update(updated_at=now)
    return sorted({str(pk) for pk in dropped.values_list("pk", flat=True)} | {str(pk) for pk in unclaimed_ids})
