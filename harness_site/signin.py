"""Password guessing is slowed down where passwords are accepted: the sign-in pages
(the site's and the admin's) and the API's token endpoint.

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
import unicodedata
from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.http import HttpRequest
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
CACHE_ERRORS = (RedisError, OSError)
T = TypeVar("T")


class SignInLocked(Exception):
    def __init__(self, retry_after: int) -> None:
        minutes = max(1, math.ceil(retry_after / 60))
        super().__init__(f"too many failed sign-ins for this user from your address; try again in {minutes} minute(s)")
        self.retry_after = retry_after


def client_address(request: HttpRequest) -> str:
    # The peer address: behind a proxy, the proxy must set REMOTE_ADDR (see docs/deploy.md).
    return str(request.META.get("REMOTE_ADDR", ""))


def _keys(username: str, address: str) -> tuple[str, str]:
    # The name as authentication sees it (stripped, NFKC-normalised), case-folded too:
    # " Alice" and "alice" must share one count, or each spelling gets its own tries.
    name = unicodedata.normalize("NFKC", username.strip()).casefold()
    digest = hashlib.sha256(f"{name}\n{address}".encode()).hexdigest()[:32]
    return f"signin-failures:{digest}", f"signin-since:{digest}"


def _check_allowed(username: str, address: str) -> None:
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


def _record_failure(username: str, address: str) -> None:
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


def _clear_failures(username: str, address: str) -> None:
    try:
        cache.delete_many(list(_keys(username, address)))
    except CACHE_ERRORS:
        log.warning("could not clear failed sign-ins", exc_info=True)


def limited_sign_in(username: str, address: str, attempt: Callable[[], T], failed: type[Exception]) -> T:
    """Run ``attempt`` (a sign-in) unless this pair is locked (SignInLocked); an
    attempt that raises ``failed`` is counted, one that succeeds clears the count."""
    _check_allowed(username, address)
    try:
        result = attempt()
    except failed:
        _record_failure(username, address)
        raise
    _clear_failures(username, address)
    return result


class LimitedSignInMixin:
    """For Django's sign-in forms (the site's and the admin's)."""

    cleaned_data: dict[str, Any]
    request: HttpRequest | None

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        address = client_address(self.request) if self.request is not None else ""
        try:
            return limited_sign_in(username, address, super().clean, forms.ValidationError)
        except SignInLocked as exc:
            raise forms.ValidationError(str(exc).capitalize() + ".", code="locked") from None


class LimitedAuthenticationForm(LimitedSignInMixin, AuthenticationForm):
    pass


class LimitedAdminAuthenticationForm(LimitedSignInMixin, AdminAuthenticationForm):
    pass
