"""Where a webhook may be sent. An endpoint's host is resolved and every address it
resolves to must be a public one: loopback, link-local (cloud metadata at
169.254.169.254), private, shared, multicast, reserved and unspecified addresses are
refused, unless ``HARNESS_WEBHOOK_ALLOWED_HOSTS`` names the host or a network holding
the address. An IPv6 address that carries an IPv4 address (6to4, Teredo, NAT64,
IPv4-compatible) is refused when the IPv4 address would be, so ``[2002:7f00:1::]``
does not reach 127.0.0.1 through a relay. Otherwise whoever may edit endpoints could make the server POST to Redis,
the database or a metadata service on its own network.

The check is done at the form and again at every delivery, and the connection goes to
the address that was checked (``pinned``), never to a second resolution of the name:
a name that answers a public address first and 127.0.0.1 next (DNS rebinding) still
reaches only the public one."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class DestinationRefused(Exception):
    """The URL may not receive webhooks (it names the reason)."""


class DestinationUnresolved(Exception):
    """The host name did not resolve (now): worth another try later."""


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str  # as written in the URL (the Host header and TLS name)
    port: int
    target: str  # path and query
    address: str  # the checked address the connection goes to


def _special(address: IPAddress) -> str | None:
    """Why an address is not a public one, or None."""
    for reason, flag in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("not globally routable", not address.is_global),
    ):
        if flag:
            return f"a {reason} address"
    return None


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _carried(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the form that carries it:
    traffic to it reaches them (a relay, a translator, a tunnel's ends)."""
    carried = []
    if address.sixtofour is not None:
        carried.append(("6to4", address.sixtofour))
    if address.teredo is not None:
        server, client = address.teredo
        carried += [("Teredo", server), ("Teredo", client)]
    last32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in NAT64:
        carried.append(("NAT64", last32))
    # ::1 is the loopback address, not a compatible one; :: is kept, since a connection
    # to it reaches this host exactly as one to 0.0.0.0 does.
    if address in IPV4_COMPATIBLE and int(address) != 1:
        carried.append(("IPv4-compatible", last32))
    return carried


def _refusal(host: str, address: IPAddress, allowed: list[str]) -> str | None:
    """Why ``address`` may not receive webhooks, or None. An IPv4-mapped address is the
    IPv4 address itself; any other that carries one is refused if either is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _refusal(host, address.ipv4_mapped, allowed)
    reason = _special(address)
    if reason and not _allowed(host, address, allowed):
        return reason
    if isinstance(address, ipaddress.IPv6Address):
        for form, inner in _carried(address):
            reason = _special(inner)
            if reason and not _allowed(host, inner, allowed):
                return f"a {form} address carrying {inner}, {reason}"
    return None


def _allowed(host: str, address: IPAddress, allowed: Iterable[str]) -> bool:
    for entry in allowed:
        entry = entry.strip().lower()
        if entry == host:
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue  # a host name entry
    return False


def check_destination(url: str) -> Destination:
    """Resolve ``url``'s host and pick the address to connect to; DestinationRefused
    when it is not an http(s) URL or any address it resolves to is refused."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DestinationRefused("a webhook URL must be http:// or https:// with a host")
    if parts.username or parts.password:
        raise DestinationRefused("a webhook URL must not carry credentials (use the endpoint's secret)")
    host = parts.hostname.lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused("the webhook URL's port is not a number from 0 to 65535") from None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise DestinationUnresolved(f"{host} does not resolve: {exc}") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    allowed = settings.HARNESS_WEBHOOK_ALLOWED_HOSTS
    for address in addresses:
        reason = _refusal(host, address, allowed)
        if reason:
            raise DestinationRefused(
                f"{host} resolves to {address}, {reason}; webhooks go only to public addresses "
                "unless HARNESS_WEBHOOK_ALLOWED_HOSTS allows it"
            )
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    return Destination(parts.scheme, host, port, target, str(addresses[0]))
