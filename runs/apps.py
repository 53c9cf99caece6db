from pathlib import Path

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Wiring that must exist before any request or task: the roles, the sockets'
        # signals and the sandbox's engine address.
        from channels.layers import get_channel_layer
        from django.conf import settings

        from ledger.export import rebuilders
        from runs.persistence.decisions import shown_contents
        from runs.roles import ensure_roles
        from sandbox.public import configure_pool, use_engine_host

        post_migrate.connect(ensure_roles, sender=self)
        # An export rebuilds what the gates were shown from the run's events.
        if shown_contents not in rebuilders:
            rebuilders.append(shown_contents)
        use_engine_host(lambda: str(settings.DOCKER_HOST))
        # Read when a process first takes a container, never in a parent that forks workers.
        configure_pool(lambda: Path(settings.WORKSPACE_ROOT), lambda: int(settings.SANDBOX_POOL_SIZE))
        # The channel layer's backend (redis.asyncio, msgpack: 40 ms of imports, more
        # on a busy machine) loads with the process, not on its first broadcast, which
        # held up the first round of a run's live trace.
        get_channel_layer()
