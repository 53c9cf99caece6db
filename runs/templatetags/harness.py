"""Small presentation helpers for the dashboard templates."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django import template
from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from approvals.services import pending_requests
from runs.models import GlobalSwitch
from runs.permissions import DECIDE_APPROVALS
from runs.views.trace import TONES
from runs.views.trace import short as short_revision
from runs.wording import duration as duration_text
from runs.wording import human as human_word

register = template.Library()

# Shown in full up to this many characters; the full event is one click away.
JSON_SHOWN_CHARS = 4000


@register.filter
def pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) <= JSON_SHOWN_CHARS:
        return text
    return f"{text[:JSON_SHOWN_CHARS]}\n… {len(text) - JSON_SHOWN_CHARS} more characters"


@register.filter
def short(value: Any) -> str:
    return short_revision(value)


@register.filter
def tone(status: str) -> str:
    return TONES.get(status, "muted")


@register.filter
def percent(ratio: float) -> int:
    return round(ratio * 100)


@register.simple_tag
def pending_approvals(user: User | AnonymousUser) -> int:
    """Requests waiting for a decision, for the reviewer's badge."""
    if not user.is_authenticated or not user.has_perm(DECIDE_APPROVALS):
        return 0
    return pending_requests().count()


@register.simple_tag
def json_detail_cap() -> int:
    return JSON_SHOWN_CHARS


@register.filter
def get_item(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key)


@register.filter
def human(value: object) -> str:
    return human_word(value)


@register.filter
def duration(seconds: float) -> str:
    return duration_text(seconds)


@register.simple_tag
def global_switch() -> GlobalSwitch:
    return GlobalSwitch.get()


@register.simple_tag
def user_roles(user: Any) -> str:
    return ", ".join(group.name for group in user.groups.all())


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


@register.simple_tag
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


@register.filter
def tone_of(event: dict[str, Any]) -> str:
    return str(event["view"]["tone"])
