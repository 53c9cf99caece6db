from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"

    def ready(self) -> None:
        # Connects the event listener in every process that writes events: web,
        # worker and beat.
        from monitoring import signals  # noqa: F401
