"""How the site shows a moment: a <time> element the page rewrites into the viewer's
zone, with the zone, UTC on hover (static/js/harness.js). The pages use ``when`` as a
template tag (pages.templatetags.harness); the apps' admin pages use ``zoned_times``,
instead of the admin's own server-zone text without one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.contrib import admin
from django.db import models
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

AdminClass = TypeVar("AdminClass", bound=type)


def ago(moment: datetime, now: datetime | None = None) -> str:
    """How long ago, for lists; the page's script keeps it current in the viewer's zone."""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def when(moment: datetime | str | None, kind: str = "full", css: str = "") -> SafeString | str:
    """A <time> element: UTC as written by the server, rewritten by the page into the
    viewer's zone (static/js/harness.js). ``kind``: full, clock or ago."""
    if moment is None:
        return ""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    utc = moment.astimezone(UTC)
    if kind == "ago":
        text = ago(utc)
    elif kind == "clock":
        text = f"{utc:%H:%M:%S} UTC"
    else:
        text = f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    return format_html(
        '<time class="{}" datetime="{}" data-when="{}" title="{} UTC">{}</time>',
        css,
        utc.isoformat(),
        kind,
        f"{utc:%Y-%m-%d %H:%M:%S}",
        text,
    )


def when_column(field: str, description: str) -> Callable[[Any, models.Model], str | None]:
    @admin.display(description=description, ordering=field)
    def column(_admin: Any, obj: models.Model) -> str | None:
        moment = getattr(obj, field)
        return None if moment is None else when(moment)

    return column


def zoned_times(model: type[models.Model]) -> Callable[[AdminClass], AdminClass]:
    """Show each of ``model``'s date-times that the admin class lists or shows read-only
    as a zoned time; the raw field stays out of the form, as a read-only field would."""
    stamps = {f.name: str(f.verbose_name) for f in model._meta.fields if isinstance(f, models.DateTimeField)}

    def decorate(cls: AdminClass) -> AdminClass:
        for name, label in stamps.items():
            setattr(cls, f"{name}_zoned", when_column(name, label))
        swapped: set[str] = set()
        for attr in ("list_display", "readonly_fields", "fields"):
            names = getattr(cls, attr, None)
            if names:
                swapped |= {n for n in names if n in stamps and attr != "list_display"}
                setattr(cls, attr, [f"{n}_zoned" if n in stamps else n for n in names])
        if swapped:
            cls.exclude = [*(getattr(cls, "exclude", None) or []), *sorted(swapped)]  # type: ignore[attr-defined]
        return cls

    return decorate
