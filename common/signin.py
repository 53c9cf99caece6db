"""Password guessing is slowed down where passwords are accepted: the sign-in pages
(the site's and the admin's) and the API's token endpoint.

Every attempt first *reserves* a slot, atomically, in the shared cache (Redis), and
only then is the password checked: a counter is incremented (and given its window as a
TTL, in the same Lua script) before the slow PBKDF2 check, so twenty simultaneous
guesses take twenty slots and only the first ``HARNESS_SIGNIN_MAX_FAILURES`` are
checked. Three counters are kept per window
(``HARNESS_SIGNIN_WINDOW_SECONDS``, starting at the first attempt):

- the (normalised username, client address) pair, limit ``HARNESS_SIGNIN_MAX_FAILURES``;
- the normalised username from any address (distributed guessing at one account),
  limit ``HARNESS_SIGNIN_MAX_FAILURES_PER_USER``;
- the client address for any username (one address spraying many accounts), limit
  ``HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS``.

A failed attempt keeps its slots; a successful one clears the pair and gives back its
slot in the other two (so the people behind one NAT address are not locked out by each
other's successful sign-ins).

**Fail-closed**: when the cache is unreachable, sign-in is refused (503 on the API,
a form error on the pages) instead of checking passwords without any limit. A Redis
outage already stops runs and live traces; existing sessions and API tokens keep
working, and an attacker must not get unlimited guesses by waiting for (or causing)
one."""

from __future__ import annotations

import hashlib
import logging
import math
import unicodedata
from collections.abc import Callable
from functools import cache as memoize
from typing import TYPE_CHECKING, Any, TypeVar

import redis
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

# KEYS: the counters; ARGV[1]: the window in seconds; ARGV[1 + i]: the limit of KEYS[i].
# When a counter has reached its limit, nothing is counted and the script returns its
# TTL (when the caller may try again); otherwise every counter takes one attempt, and a
# new counter gets the window as its TTL, and it returns 0. One script, so the check,
# the increments and their TTLs are one atomic step: no race, no count without a window.
_RESERVE = """
local wait = 0
for i, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') >= tonumber(ARGV[i + 1]) then
    wait = math.max(wait, redis.call('TTL', key), 1)
  end
end
if wait > 0 then return wait end
for _, key in ipairs(KEYS) do
  redis.call('INCR', key)
  if redis.call('TTL', key) < 0 then redis.call('EXPIRE', key, ARGV[1]) end
end
return 0
"""


class SignInLocked(Exception):
    def __init__(self, retry_after: int) -> None:
        minutes = max(1, math.ceil(retry_after / 60))
        super().__init__(f"too many failed sign-ins for this user from your address; try again in {minutes} minute(s)")
        self.retry_after = retry_after


class SignInUnavailable(Exception):
    """The attempt could not be counted (the cache is unreachable), so it is refused."""

    def __init__(self) -> None:
        super().__init__("sign-in is temporarily unavailable; try again in a minute")
        self.retry_after = 60


def client_address(request: HttpRequest) -> str:
    # The peer address: behind a proxy, the proxy must set REMOTE_ADDR (see docs/deploy.md).
    return str(request.META.get("REMOTE_ADDR", ""))


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _keys(username: str, address: str) -> tuple[str, str, str]:
    """(pair, username, address) counter keys."""
    # The name as authentication sees it (stripped, NFKC-normalised), case-folded too:
    # " Alice" and "alice" must share one count, or each spelling gets its own tries.
    name = unicodedata.normalize("NFKC", username.strip()).casefold()
    return tuple(  # type: ignore[return-value]
        cache.make_and_validate_key(f"signin-attempts:{kind}:{_digest(*parts)}")
        for kind, parts in (("pair", (name, address)), ("user", (name,)), ("address", (address,)))
    )


@memoize
def _client(location: str) -> redis.Redis:
    return redis.Redis.from_url(location, socket_timeout=2, socket_connect_timeout=2)


def _redis() -> redis.Redis:
    # The same Redis as the shared cache (tests point CACHES elsewhere to simulate an outage).
    return _client(str(settings.CACHES["default"]["LOCATION"]))


def _reserve(keys: tuple[str, str, str]) -> None:
    limits = (
        settings.HARNESS_SIGNIN_MAX_FAILURES,
        settings.HARNESS_SIGNIN_MAX_FAILURES_PER_USER,
        settings.HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS,
    )
    try:
        # Arguments go as text either way (redis-py writes an int as its digits).
        reply = _redis().eval(_RESERVE, len(keys), *keys, *(str(n) for n in (settings.HARNESS_SIGNIN_WINDOW_SECONDS, *limits)))
        # redis-py types every reply as Awaitable[str] | str, even a sync client's; the script returns an integer.
        wait = int(reply)  # type: ignore[arg-type]
    except CACHE_ERRORS:
        log.error("sign-in refused: the attempt could not be counted (cache unreachable)", exc_info=True)
        raise SignInUnavailable() from None
    if wait:
        raise SignInLocked(wait)


def _release(keys: tuple[str, str, str], cleared: bool) -> None:
    """Give back the slots of an attempt that did not fail; ``cleared`` also forgets the
    pair's earlier failures (a successful sign-in)."""
    pair, *shared = keys
    try:
        with _redis().pipeline(transaction=True) as pipe:
            pipe.delete(pair) if cleared else pipe.decr(pair)
            for key in shared:
                pipe.decr(key)
            pipe.execute()
    except CACHE_ERRORS:
        log.warning("could not give back a sign-in attempt", exc_info=True)


def attempts_left(username: str, address: str) -> int | None:
    """How many more failures the tightest limit admits for this user and address
    (None when the count cannot be read: the refusal then says nothing of it)."""
    limits = (
        settings.HARNESS_SIGNIN_MAX_FAILURES,
        settings.HARNESS_SIGNIN_MAX_FAILURES_PER_USER,
        settings.HARNESS_SIGNIN_MAX_FAILURES_PER_ADDRESS,
    )
    try:
        counts = _redis().mget(_keys(username, address))
    except CACHE_ERRORS:
        return None
    # A sync client's reply is a list, though redis-py types it as possibly awaitable.
    return min(limit - int(count or 0) for limit, count in zip(limits, counts, strict=True))  # type: ignore[arg-type]


def limited_sign_in(username: str, address: str, attempt: Callable[[], T], failed: type[Exception]) -> T:
    """Reserve an attempt for this user and address (SignInLocked when one of the limits
    is used up, SignInUnavailable when it cannot be counted), then run ``attempt`` (a
    sign-in). One that raises ``failed`` keeps its slots; one that succeeds clears them."""
    keys = _keys(username, address)
    _reserve(keys)
    try:
        result = attempt()
    except failed:
        raise
    except BaseException:
        _release(keys, cleared=False)  # not a wrong password (e.g. a server error): not counted
        raise
    _release(keys, cleared=True)
    return result


# The mixin's clean() extends the sign-in form's it is mixed into; the type checker
# is told of that form (its cleaned_data, request and clean()), the runtime is not.
if TYPE_CHECKING:
    _SignInForm = AuthenticationForm
else:
    _SignInForm = object


class LimitedSignInMixin(_SignInForm):
    """For Django's sign-in forms (the site's and the admin's)."""

    def clean(self) -> dict[str, Any]:
        if not self.cleaned_data.get("password"):
            # No password, nothing checked (the field says it is required): neither an
            # attempt nor a success, which would otherwise clear the earlier failures.
            return super().clean()
        username = str(self.cleaned_data.get("username") or "")
        address = client_address(self.request) if self.request is not None else ""
        try:
            return limited_sign_in(username, address, super().clean, forms.ValidationError)
        except forms.ValidationError as exc:
            # Warned before the lockout, not only after it.
            left = attempts_left(username, address)
            if left is None or left > 1:
                raise
            minutes = -(-settings.HARNESS_SIGNIN_WINDOW_SECONDS // 60)
            warning = (
                f"One more failed attempt locks sign-in for this user from your address for up to {minutes} minute(s)."
                if left == 1
                else f"Sign-in is now locked for this user from your address for up to {minutes} minute(s)."
            )
            raise forms.ValidationError([*exc.error_list, forms.ValidationError(warning, code="last_attempt")]) from None
        except SignInLocked as exc:
            raise forms.ValidationError(str(exc).capitalize() + ".", code="locked") from None
        except SignInUnavailable as exc:
            raise forms.ValidationError(str(exc).capitalize() + ".", code="unavailable") from None


class LimitedAuthenticationForm(LimitedSignInMixin, AuthenticationForm):
    pass


class LimitedAdminAuthenticationForm(LimitedSignInMixin, AdminAuthenticationForm):
    pass
