"""The provider's groups as Harness groups: plain checks and one write."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import Group, User

MAX_GROUPS = 1000  # a claim longer than this is cut (Entra ID sends at most 200)
MAX_NAME = 150  # Group.name's length


class SignInRefused(Exception):
    """The provider signed someone in whom Harness does not let in; the message is
    shown to them as it is."""


def groups_in(claims: dict[str, Any], claim: str) -> list[str]:
    """The group names in ``claims[claim]``: a list of strings or one string (some
    providers send a single group so), names cut to fit, at most MAX_GROUPS."""
    value = claims.get(claim, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise SignInRefused(f"the provider's {claim!r} claim is not a list of group names")
    return sorted({str(name)[:MAX_NAME] for name in value[:MAX_GROUPS] if isinstance(name, str | int) and str(name)})


def check_allowed(groups: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse someone in none of the ``allowed`` groups (none configured: all allowed)."""
    wanted = set(allowed)
    if wanted and not wanted.intersection(groups):
        raise SignInRefused(
            "Your account is not in a group that may sign in to Harness. Ask whoever manages Harness at your company to add you to one."
        )


def do_sync_groups(user: User, names: Iterable[str]) -> None:
    """Make ``user``'s Harness groups exactly those of ``names`` that exist in Harness
    (a provider group with no Harness group of its name gives nothing). ``set`` changes
    only what differs, and a removal fires the m2m signal that makes the user's open
    live sockets check their permissions again (live.session_sockets)."""
    user.groups.set(Group.objects.filter(name__in=list(names)))
