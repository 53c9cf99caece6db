"""Times in the Django admin as everywhere else on the site: a <time> element the
page shows in the viewer's zone, with the zone, UTC on hover (static/js/harness.js),
instead of the admin's own server-zone text without one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import admin
from django.db import models

from runs.templatetags.harness import when

AdminClass = TypeVar("AdminClass", bound=type)


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
