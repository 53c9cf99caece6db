from django.apps import AppConfig


class TrialsConfig(AppConfig):
    name = "trials"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The event listener (a trial's reviewer answers its runs' requests) and the
        # Celery tasks, in every process that loads Django.
        from trials import signals, tasks  # noqa: F401
