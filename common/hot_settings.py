"""The settings the checkpoint's path reads at every statement or value, each read once
until it changes.

A read of ``settings.X`` is Django's ``LazyObject.__getattribute__`` in Python, some
3,000 instructions; a durable step on SQLite read ``DEBUG`` seven times (the query
log's check, ``queries_logged``, at each BEGIN, COMMIT and kept cursor) and ``USE_TZ``
four (``timezone.now``). Settings change only through ``override_settings`` (the test
suite's, pytest-django's ``settings`` fixture too), which says so (``setting_changed``),
and that forgets them here; Django's own caches of settings (a connection's time zone)
are kept the same way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

_read: dict[str, Any] = {}


def setting(name: str) -> Any:
    """``settings.<name>``, read once until a setting changes."""
    try:
        return _read[name]
    except KeyError:
        value = _read[name] = getattr(settings, name)
        return value


def now() -> datetime:
    """``django.utils.timezone.now()``: aware in UTC where ``USE_TZ``, naive otherwise."""
    return datetime.now(UTC if setting("USE_TZ") else None)


@receiver(setting_changed)
def _forget(**kwargs: object) -> None:
    _read.clear()
