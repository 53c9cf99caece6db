from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "sandbox"
    default_auto_field = "django.db.models.BigAutoField"
