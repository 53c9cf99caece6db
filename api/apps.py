from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "REST API"

    def ready(self) -> None:
        from api.models import revoke_when_offboarded
        from common.offboarding import offboarded

        offboarded.connect(revoke_when_offboarded, dispatch_uid="api-tokens-offboarded")
