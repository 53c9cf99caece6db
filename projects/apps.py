from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ProjectsConfig(AppConfig):
    name = "projects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from projects.models import ensure_default_project

        post_migrate.connect(ensure_default_project, sender=self)
