"""Small presentation helpers for the dashboard templates."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.contrib.auth.models import AnonymousUser, User
from django.utils.safestring import SafeString, mark_safe

from common.permissions import DECIDE_APPROVALS
from common.times import when
from core.visible import visible_html
from live.trace import TONES, outcome_tone
from live.trace import short as short_revision
from live.wording import duration as duration_text
from live.wording import human as human_word
from pages.inbox import waiting_for
from projects.access import roles_shown
from runs.models import GlobalSwitch, Run
from runs.outcome import code_of, label_of

register = template.Library()

# Shown in full up to this many characters; the full event is one click away.
JSON_SHOWN_CHARS = 4000


@register.filter
def pretty_json(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) <= JSON_SHOWN_CHARS:
        return text
    return f"{text[:JSON_SHOWN_CHARS]}\n… {len(text) - JSON_SHOWN_CHARS} more characters"


@register.filter(is_safe=True)
def visible(value: Any) -> SafeString:
    """Text a model, a tool or a person wrote, escaped, with each character that hides
    or reorders text shown as a mark naming it (core.visible, DESIGN 15)."""
    return mark_safe(visible_html("" if value is None else str(value)))  # noqa: S308 - escaped by visible_html


@register.filter
def short(value: Any) -> str:
    return short_revision(value)


@register.filter
def tone(status: str) -> str:
    return TONES.get(status, "muted")


@register.filter
def run_label(run: Run) -> str:
    """A run's outcome in words, as every page tells it (runs.outcome)."""
    return label_of(run)


@register.filter
def run_code(run: Run) -> str:
    return code_of(run)


@register.filter
def run_tone(run: Run) -> str:
    return outcome_tone(code_of(run))


@register.filter
def percent(ratio: float) -> int:
    return round(ratio * 100)


@register.simple_tag
def pending_approvals(user: User | AnonymousUser) -> int:
    """Requests waiting for a decision in the reviewer's projects, for the badge: the
    inbox's count (``waiting_for``), never another project's."""
    if not user.is_authenticated or not user.has_perm(DECIDE_APPROVALS):
        return 0
    return waiting_for(user).count()


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
    """Roles are held per project: the header says where (projects.access.roles_shown)."""
    return roles_shown(user)


# {% when %}: the one <time> element, kept in common.times for the apps' admin pages too.
register.simple_tag(when)


@register.filter
def tone_of(event: dict[str, Any]) -> str:
    return str(event["view"]["tone"])
