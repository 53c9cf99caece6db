from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"

    def ready(self) -> None:
        # Connects the event listener in every process that writes events (web,
        # worker and beat), unless both metrics and traces are off.
        from django.conf import settings

        if settings.HARNESS_METRICS_ENABLED or settings.HARNESS_TRACES_URL:
            from monitoring import signals  # noqa: F401
