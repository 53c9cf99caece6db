"""Each person's choice, per project, of which approval requests they are mailed
about (notifications.mail reads it): validated first, then saved."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from common.permissions import DECIDE_APPROVALS
from notifications.models import MailPreference
from projects.access import projects_with
from projects.models import Project


class BadChoice(ValueError):
    """A choice that is not one of MailPreference.Choice, or a project not the person's."""


def choices_of(user: Any) -> list[tuple[Project, str]]:
    """The projects where ``user`` may decide requests, each with their choice (all by default)."""
    mine = dict(MailPreference.objects.filter(user=user).values_list("project_id", "choice"))
    return [
        (project, mine.get(project.pk, MailPreference.Choice.ALL)) for project in projects_with(user, DECIDE_APPROVALS).order_by("name")
    ]


def check_choices(user: Any, posted: Mapping[str, str]) -> dict[int, str]:
    """``posted`` (``project-<id>`` to a choice) as project id to choice, for the
    user's own projects only; BadChoice names what is wrong."""
    allowed = {project.pk for project, _choice in choices_of(user)}
    chosen = {}
    for key, value in posted.items():
        if not key.startswith("project-"):
            continue
        try:
            project_id = int(key.removeprefix("project-"))
        except ValueError:
            raise BadChoice(f"{key!r} names no project") from None
        if project_id not in allowed:
            raise BadChoice("you may choose only for projects where you decide requests")
        if value not in MailPreference.Choice.values:
            raise BadChoice(f"{value[:40]!r} is not one of {', '.join(MailPreference.Choice.values)}")
        chosen[project_id] = value
    return chosen


def do_save_choices(user: Any, chosen: Mapping[int, str]) -> None:
    # One transaction: a page's choices are saved together or not at all.
    with transaction.atomic():
        for project_id, choice in chosen.items():
            MailPreference.objects.update_or_create(user=user, project_id=project_id, defaults={"choice": choice})
