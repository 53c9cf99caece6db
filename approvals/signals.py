"""What approvals tell the rest of the site. A decision or a lapse can end a run's
wait; who drives runs (runs.queue, connected in runs.apps) listens, so approvals
never import the run's driver or Celery."""

from django.dispatch import Signal

# Sent after the commit that ended the wait, with ``run_id``.
wait_may_end = Signal()
