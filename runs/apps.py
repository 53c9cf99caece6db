from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Wiring that must exist before any request or task: the sandbox's engine
        # address, what approvals need of runs (their port) and approvals' wake-ups
        # come from here (the composition root's side).
        from channels.layers import get_channel_layer
        from django.conf import settings

        from approvals.ports import connect_runs
        from approvals.signals import wait_may_end
        from runs.queue import resume_on_signal
        from runs.roles import ensure_roles
        from runs.runtime import RunsForApprovals
        from sandbox.docker_client import use_engine_host

        post_migrate.connect(ensure_roles, sender=self)
        connect_runs(RunsForApprovals())
        wait_may_end.connect(resume_on_signal, dispatch_uid="runs.queue.resume_on_signal")
        use_engine_host(lambda: str(settings.DOCKER_HOST))
        # The channel layer's backend (redis.asyncio, msgpack: 40 ms of imports, more
        # on a busy machine) loads with the process, not on its first broadcast, which
        # held up the first round of a run's live trace.
        get_channel_layer()
