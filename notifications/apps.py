from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the event listener and registers the Celery tasks in every
        # process that loads Django: web, worker and beat.
        from notifications import signals, tasks  # noqa: F401
