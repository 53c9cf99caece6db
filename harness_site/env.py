"""Typed readers for settings that come from environment variables.

Every reader fails at start with a message naming the variable, so a typo in a
deployment shows up as a clear error instead of a silently ignored default.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from typing import TypeVar

Choice = TypeVar("Choice", bound=str)


class SettingError(Exception):
    """A setting from the environment is missing or malformed."""


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    source = os.environ if env is None else env
    value = source.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str | None = None, env: Mapping[str, str] | None = None) -> str:
    value = _raw(name, env)
    if value is None:
        if default is None:
            raise SettingError(f"{name} is required but not set")
        return default
    return value


def env_choice(name: str, default: Choice, choices: tuple[Choice, ...], env: Mapping[str, str] | None = None) -> Choice:
    """One of ``choices``, typed as they are (a Literal for a setting declared as one)."""
    value = env_str(name, default, env)
    for choice in choices:
        if value == choice:
            return choice
    raise SettingError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def env_bool(name: str, default: bool, env: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, env)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingError(f"{name} must be a boolean (true/false/1/0/yes/no), got {value!r}")


def env_int(
    name: str,
    default: int,
    env: Mapping[str, str] | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    value = _raw(name, env)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise SettingError(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise SettingError(f"{name} must be at least {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise SettingError(f"{name} must be at most {maximum}, got {number}")
    return number


def env_float(name: str, default: float, env: Mapping[str, str] | None = None, minimum: float = 0.0) -> float:
    value = _raw(name, env)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise SettingError(f"{name} must be a number, got {value!r}") from None
    if number < minimum:
        raise SettingError(f"{name} must be at least {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str], env: Mapping[str, str] | None = None) -> list[str]:
    value = _raw(name, env)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(item == "" for item in items):
        raise SettingError(f"{name} must be a comma-separated list without empty items, got {value!r}")
    return items


def env_url(name: str, default: str, schemes: tuple[str, ...], env: Mapping[str, str] | None = None) -> str:
    value = env_str(name, default, env)
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in schemes or not rest:
        allowed = ", ".join(f"{s}://" for s in schemes)
        raise SettingError(f"{name} must be a URL starting with one of {allowed}; got {value!r}")
    return value


def env_identity(name: str, default: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """A git identity, ``Name <email>``, as (name, email)."""
    value = env_str(name, default, env)
    match = re.fullmatch(r"([^<>\n]+?)\s*<([^<>\s]+@[^<>\s]+)>", value)
    if match is None:
        raise SettingError(f"{name} must look like 'Name <email@host>', got {value!r}")
    return match.group(1), match.group(2)


def env_networks(
    name: str, default: list[str], env: Mapping[str, str] | None = None
) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """A comma-separated list of networks in CIDR notation (an address alone is one host)."""
    networks = []
    for item in env_list(name, default, env):
        try:
            networks.append(ipaddress.ip_network(item, strict=True))
        except ValueError as error:
            raise SettingError(f"{name} must list networks such as 10.0.0.0/8 or ::1; {item!r}: {error}") from None
    return networks


def env_secret_file(name: str, env: Mapping[str, str] | None = None) -> str:
    """The secret held in the file ``name`` points at (a mounted secret), trailing
    newline removed; "" when the variable is unset. A named file that is missing,
    unreadable or empty fails at start."""
    path = _raw(name, env)
    if path is None:
        return ""
    try:
        value = open(path, encoding="utf-8").read().strip()  # noqa: SIM115 - read once at start
    except OSError as exc:
        raise SettingError(f"{name} names {path!r}, which cannot be read: {exc.strerror}") from None
    if not value:
        raise SettingError(f"{name} names {path!r}, which is empty")
    return value
