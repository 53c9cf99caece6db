from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created

from ledger.verify import sha256


class LedgerConfig(AppConfig):
    name = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        connection_created.connect(_sqlite_functions, dispatch_uid="ledger_sqlite_functions")


def _sqlite_functions(sender: Any, connection: Any, **kwargs: Any) -> None:
    """SQLite's ``ledger_sha256(text)``: the digest of an entry's canonical JSON, which
    the writer's one statement computes in SQL as PostgreSQL's sha256 does (ledger.writer)."""
    if connection.vendor == "sqlite":
        connection.connection.create_function("ledger_sha256", 1, _sha256_text, deterministic=True)


def _sha256_text(text: str) -> str:
    return sha256(text.encode("utf-8"))
