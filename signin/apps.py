from django.apps import AppConfig


class SigninConfig(AppConfig):
    name = "signin"
    default_auto_field = "django.db.models.BigAutoField"
