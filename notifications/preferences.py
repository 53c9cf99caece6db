"""Each person's choice, per project, of which approval requests they are mailed
about (notifications.mail reads it), and the address mail goes to: validated first,
then saved; and, while mail is on, the reviewers whom no mail can reach."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from common.permissions import DECIDE_APPROVALS
from notifications.mail import reviewers_of
from notifications.models import MailPreference
from projects.access import projects_with
from projects.models import Project

# What a mail address may be (RFC 5321's path limit, as Django's User.email).
ADDRESS_CHARS = 254


class BadChoice(ValueError):
    """A choice that is not one of MailPreference.Choice, a project not the person's,
    or an address that is none."""


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


def check_address(posted: Mapping[str, str]) -> str:
    """The posted ``address`` (empty: no mail), or BadChoice naming what is wrong."""
    address = posted.get("address", "").strip()
    if len(address) > ADDRESS_CHARS:
        raise BadChoice(f"the address is {len(address)} characters long; at most {ADDRESS_CHARS}")
    if address:
        try:
            validate_email(address)
        except ValidationError:
            raise BadChoice(f"{address[:80]!r} is not a mail address (name@example.org)") from None
    return address


def do_save_choices(user: Any, chosen: Mapping[int, str], address: str) -> None:
    # One transaction: a page's choices and address are saved together or not at all.
    with transaction.atomic():
        for project_id, choice in chosen.items():
            MailPreference.objects.update_or_create(user=user, project_id=project_id, defaults={"choice": choice})
        User.objects.filter(pk=user.pk).update(email=address)
    user.email = address


def unreachable_reviewers(user: Any) -> list[tuple[Project, list[str]]]:
    """While mail is on: in each project where ``user`` decides requests, the reviewers
    with no address (no mail about its requests reaches them), by name."""
    if not settings.HARNESS_MAIL_ENABLED:
        return []
    found = []
    for project, _choice in choices_of(user):
        names = list(reviewers_of(project.pk).filter(email="").order_by("username").values_list("username", flat=True).distinct())
        if names:
            found.append((project, names))
    return found
