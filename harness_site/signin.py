"""Password guessing is slowed down where passwords are accepted: the sign-in page
and the API's token endpoint.

Failed attempts are counted per (username, client address) in the shared cache
(Redis), so every web process sees the same count. After
``HARNESS_SIGNIN_MAX_FAILURES`` failures within ``HARNESS_SIGNIN_WINDOW_SECONDS``,
further attempts for that pair are refused until the window (which starts at the
first failure) has passed; a successful sign-in clears the count. When the cache is
unreachable, sign-in is not blocked: locking everyone out would be worse."""

from __future__ import annotations

import hashlib
import logging
import math
import time
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.http import HttpRequest
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
CACHE_ERRORS = (RedisError, OSError)


class SignInLocked(Exception):
    def __init__(self, retry_after: int) -> None:
        minutes = max(1, math.ceil(retry_after / 60))
        super().__init__(f"too many failed sign-ins for this user from your address; try again in {minutes} minute(s)")
        self.retry_after = retry_after


def client_address(request: HttpRequest) -> str:
    # The peer address: behind a proxy, the proxy must set REMOTE_ADDR (see docs/deploy.md).
    return str(request.META.get("REMOTE_ADDR", ""))


def _keys(username: str, address: str) -> tuple[str, str]:
    digest = hashlib.sha256(f"{username.casefold()}\n{address}".encode()).hexdigest()[:32]
    return f"signin-failures:{digest}", f"signin-since:{digest}"


def check_signin_allowed(username: str, address: str) -> None:
    """Raise SignInLocked while this pair has used up its failures."""
    count_key, since_key = _keys(username, address)
    try:
        values: dict[str, Any] = cache.get_many([count_key, since_key])
    except CACHE_ERRORS:
        log.warning("sign-in limits unavailable (cache unreachable); not limiting", exc_info=True)
        return
    if int(values.get(count_key) or 0) < settings.HARNESS_SIGNIN_MAX_FAILURES:
        return
    since = float(values.get(since_key) or time.time())
    raise SignInLocked(max(1, math.ceil(since + settings.HARNESS_SIGNIN_WINDOW_SECONDS - time.time())))


def record_failure(username: str, address: str) -> None:
    count_key, since_key = _keys(username, address)
    window = settings.HARNESS_SIGNIN_WINDOW_SECONDS
    try:
        # add() only sets a missing key, so the window starts at the first failure;
        # incr() is atomic in Redis, so concurrent guesses are all counted.
        cache.add(since_key, time.time(), window)
        cache.add(count_key, 0, window)
        cache.incr(count_key)
    except (*CACHE_ERRORS, ValueError):  # ValueError: the count expired between add and incr
        log.warning("could not record a failed sign-in", exc_info=True)


def clear_failures(username: str, address: str) -> None:
    try:
        cache.delete_many(list(_keys(username, address)))
    except CACHE_ERRORS:
        log.warning("could not clear failed sign-ins", exc_info=True)


class LimitedAuthenticationForm(AuthenticationForm):
    """Django's sign-in form, refusing a (username, address) pair with too many failures."""

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        address = client_address(self.request) if self.request is not None else ""
        try:
            check_signin_allowed(username, address)
        except SignInLocked as exc:
            raise forms.ValidationError(str(exc).capitalize() + ".", code="locked") from None
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            record_failure(username, address)
            raise
        clear_failures(username, address)
        return cleaned
