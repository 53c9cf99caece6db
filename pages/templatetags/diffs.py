"""The diff's tables for templates (pages.diff_view builds them)."""

from __future__ import annotations

from collections.abc import Iterable

from django import template

from pages.diff_review import LineComment
from pages.diff_view import Tables, diff_tables

register = template.Library()


@register.simple_tag
def diff_rows(diff: str, sources: dict[str, str] | str = "", comments: Iterable[LineComment] | str = "") -> Tables:
    """``{% diff_rows diff sources comments as d %}``: the tables, with a reviewer's
    line comments (a request's, once it asked for changes) drawn under their lines."""
    return diff_tables(diff, sources, comments if not isinstance(comments, str) else ())
