from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from runs.roles import ensure_roles
        from runs.session_sockets import connect_signals

        post_migrate.connect(ensure_roles, sender=self)
        connect_signals()
