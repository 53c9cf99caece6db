from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "live"

    def ready(self) -> None:
        # Every process that can change a user (web, worker, the admin's commands)
        # tells that user's open sockets to check their session again.
        from live.session_sockets import connect_signals

        connect_signals()
