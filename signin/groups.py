"""The provider's groups as Harness groups and roles, through the admins' mappings
only; and what a refused sign-in ends (offboarding)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from common.offboarding import offboarded
from projects.access import forget
from projects.audit import record
from projects.models import Membership
from signin.models import GroupMapping, Identity

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


@dataclass(frozen=True)
class Changes:
    """What a sign-in changed of a person's groups and roles (names, for the audit)."""

    groups_added: list[str] = field(default_factory=list)
    groups_removed: list[str] = field(default_factory=list)
    roles_added: list[dict[str, str]] = field(default_factory=list)
    roles_removed: list[dict[str, str]] = field(default_factory=list)

    def audit(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if value}


def do_sync_groups(identity: Identity, names: Iterable[str]) -> Changes:
    """Give ``identity``'s user what the admins mapped the provider groups ``names``
    onto (signin.GroupMapping), and take back what an earlier sign-in gave that they
    no longer map to; audited when anything changed. Never by a group's name: a
    provider group without a mapping gives nothing. A group or role the person holds in
    person is neither given nor taken here. A removal fires the m2m signal that makes
    the user's open live sockets check their permissions again (live.session_sockets)."""
    user = identity.user
    mappings = list(GroupMapping.objects.filter(provider_group__in=sorted(set(names))).select_related("group", "project"))
    wanted = {m.group for m in mappings if m.group is not None}
    held = set(user.groups.all())
    given_before = {g for g in held if g.pk in set(identity.granted_groups)}
    adding, removing = wanted - held, given_before - wanted
    user.groups.remove(*removing)
    user.groups.add(*adding)
    identity.granted_groups = sorted(g.pk for g in (given_before & wanted) | adding)
    identity.save(update_fields=["granted_groups"])

    roles = {(m.project, m.role) for m in mappings if m.project is not None}
    mine = list(Membership.objects.filter(user=user).select_related("project"))
    dropped = [m for m in mine if m.via_provider and (m.project, m.role) not in roles]
    Membership.objects.filter(pk__in=[m.pk for m in dropped]).delete()
    kept = {(m.project, m.role) for m in mine if m not in dropped}
    given = sorted(roles - kept, key=lambda pair: (pair[0].slug, pair[1]))
    Membership.objects.bulk_create([Membership(project=p, user=user, role=r, via_provider=True) for p, r in given])

    changes = Changes(
        sorted(g.name for g in adding),
        sorted(g.name for g in removing),
        [{"project": p.slug, "role": r} for p, r in given],
        sorted(({"project": m.project.slug, "role": m.role} for m in dropped), key=lambda r: (r["project"], r["role"])),
    )
    if changes.audit():
        record(None, None, "signin_groups_changed", user=user.username, **changes.audit())
        forget(user)
    return changes


REFUSED_REASON = "the identity provider refused your sign-in on {day}: you were offboarded; make a new token once you are let in again"


def offboard(identity: Identity) -> None:
    """What a refused sign-in of a known person ends at once, in one transaction and
    audited: every session of theirs (a new unusable password changes the hash each
    session is signed with, so Django ends them at their next request and their live
    sockets close), their API tokens (revoked with the reason on their token list),
    and what the provider's groups gave them (do_sync_groups with none). Roles and
    groups given in person stay (the sessions and tokens that could use them are gone,
    and the next sign-in is refused while the provider refuses it)."""
    user = identity.user
    with transaction.atomic():
        changes = do_sync_groups(identity, [])
        user.set_unusable_password()
        user.save(update_fields=["password"])
        reason = REFUSED_REASON.format(day=timezone.now().strftime("%Y-%m-%d"))
        ended: list[Any] = [count for _receiver, count in offboarded.send(sender=Identity, user=user, reason=reason)]
        revoked = sum(count for count in ended if isinstance(count, int))
        record(None, None, "offboarded", user=user.username, sessions="ended", tokens_revoked=revoked, **changes.audit())
