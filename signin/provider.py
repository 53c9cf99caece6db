"""Where the OpenID provider's endpoints are: the explicit settings
(HARNESS_OIDC_<NAME>_ENDPOINT) or, for those not set, the issuer's discovery
document (``/.well-known/openid-configuration``), read once per process at the
first sign-in and kept. A document whose ``issuer`` is not the configured one is
refused (OpenID Connect Discovery 1.0, section 4.3): it would let another issuer's
tokens in."""

from __future__ import annotations

import threading
from typing import Any

import requests
from django.conf import settings

# The mozilla-django-oidc setting each endpoint answers, and its discovery field.
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": ("authorization", "authorization_endpoint"),
    "OIDC_OP_TOKEN_ENDPOINT": ("token", "token_endpoint"),
    "OIDC_OP_USER_ENDPOINT": ("userinfo", "userinfo_endpoint"),
    "OIDC_OP_JWKS_ENDPOINT": ("jwks", "jwks_uri"),
}
_lock = threading.Lock()
_discovered: dict[str, Any] = {}


class ProviderUnreachable(Exception):
    """The discovery document could not be read (or is not the issuer's)."""


def discovery() -> dict[str, Any]:
    """The issuer's discovery document, fetched on first use. A failure is not kept:
    the next sign-in tries again."""
    issuer = settings.HARNESS_OIDC_ISSUER
    with _lock:
        if _discovered.get("issuer") == issuer:
            return _discovered
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise ProviderUnreachable(f"could not read {url}: {type(exc).__name__}") from None
        if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
            raise ProviderUnreachable(f"{url} names another issuer than {issuer}")
        _discovered.clear()
        _discovered.update(document, issuer=issuer)
        return _discovered


def endpoint(setting: str) -> str:
    """The URL of the endpoint mozilla-django-oidc knows as ``setting``."""
    key, field = ENDPOINTS[setting]
    explicit: str = settings.HARNESS_OIDC_ENDPOINTS[key]
    if explicit:
        return explicit
    value = discovery().get(field)
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        raise ProviderUnreachable(f"the issuer's discovery document has no {field}")
    return value


def oidc_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's ``get_settings`` with the endpoints resolved here."""
    if attr in ENDPOINTS:
        return endpoint(attr)
    return getattr(settings, attr, *default)
