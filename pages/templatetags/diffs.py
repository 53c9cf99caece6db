"""The diff's tables for templates (pages.diff_view builds them)."""

from __future__ import annotations

from django import template

from pages.diff_view import Tables, diff_tables

register = template.Library()


@register.filter
def diff_rows(diff: str, sources: dict[str, str] | str = "") -> Tables:
    return diff_tables(diff, sources)
