"""Live sockets follow the session. A trace socket is checked when it connects, and
again whenever something about its user changes: signing out, a change of groups or
permissions, deactivation or a new password. Each socket joins its user's group; the
auth signals below tell that group (after the change commits) and every socket of the
user re-reads its session and permissions, closing itself if they no longer hold.

The group message goes through Redis pub/sub, which may drop a message (seen here
about once in a dozen sign-outs): every heartbeat (HARNESS_LIVE_HEARTBEAT_SECONDS)
re-reads the session too, so a lost notice delays the close by at most one beat."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, User
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

log = logging.getLogger(__name__)
RECHECK = {"type": "session.recheck"}


def user_group(user_id: Any) -> str:
    return f"user-{user_id}"


def current_user(session_key: str | None) -> AbstractBaseUser | AnonymousUser:
    """Who the session belongs to now: anonymous once it was signed out, expired, its
    user deactivated or deleted, or its password changed (Django's own checks)."""
    if not session_key:
        return AnonymousUser()
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]


def notify(user_ids: Iterable[Any]) -> None:
    """Tell the users' sockets to check again, once the change is committed."""
    ids = sorted({str(pk) for pk in user_ids})
    if not ids:
        return

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        for pk in ids:
            try:
                async_to_sync(layer.group_send)(user_group(pk), RECHECK)
            except Exception:  # the sockets' periodic recheck still closes them
                log.warning("could not notify the live sockets of user %s", pk, exc_info=True)

    transaction.on_commit(send)


def _signed_out(sender: Any, request: Any, user: AbstractBaseUser | None, **_: Any) -> None:
    if user is not None:
        notify([user.pk])


def _user_saved(sender: Any, instance: User, **_: Any) -> None:
    # Deactivation, staff or superuser flags, a new password: all change what a socket may see.
    notify([instance.pk])


def _memberships_changed(sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[Any] | None, **_: Any) -> None:
    if not action.startswith("post_"):
        return
    if isinstance(instance, Group):
        # A group's members gained or lost it (reverse side), or its permissions changed.
        notify(instance.user_set.values_list("pk", flat=True) if sender is Group.permissions.through else (pk_set or []))
    else:
        notify([instance.pk])


def connect_signals() -> None:
    user_logged_out.connect(_signed_out, dispatch_uid="session-sockets-logout")
    post_save.connect(_user_saved, sender=User, dispatch_uid="session-sockets-user")
    post_delete.connect(_user_saved, sender=User, dispatch_uid="session-sockets-user-deleted")
    for through in (User.groups.through, User.user_permissions.through, Group.permissions.through):
        m2m_changed.connect(_memberships_changed, sender=through, dispatch_uid=f"session-sockets-{through.__name__}")
