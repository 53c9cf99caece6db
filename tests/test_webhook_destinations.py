"""Webhooks reach only public addresses unless HARNESS_WEBHOOK_ALLOWED_HOSTS allows
others: refused in the admin form and again at delivery (a name resolving to 127.0.0.1
included), the connection pinned to the checked address, and only the status code
and timing of the answer kept, never its body. An IPv6 address that carries an IPv4
one (6to4, Teredo, NAT64, IPv4-compatible, IPv4-mapped) is refused whenever the IPv4
address would be: a property test over every form and any address."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from hypothesis import example, given
from hypothesis import strategies as st
from pytest_django import Settings

from notifications import destinations, services
from notifications.admin import EndpointForm
from notifications.models import Delivery, DeliveryAttempt, WebhookEndpoint
from tests.test_webhooks import Receiver, receiver, waiting_run  # noqa: F401 - receiver: the loopback HTTP receiver fixture

# What socket.getaddrinfo answers.
Answers = Sequence[
    tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]]
]

REFUSED = [
    "http://127.0.0.1:6379/",
    "http://localhost:8000/hook",  # a name that resolves to 127.0.0.1
    "http://[::1]/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.1.2.3/hook",
    "http://192.168.0.10/hook",
    "http://172.16.0.1/hook",
    "http://100.64.0.1/hook",  # shared address space
    "http://224.0.0.1/hook",
    "http://240.0.0.1/hook",  # reserved
    "http://0.0.0.0/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/hook",
    "http://[2002:7f00:1::]/hook",  # 6to4 carrying 127.0.0.1 (a public address to ipaddress)
    "http://[2002:a01:203:5::9]/hook",  # 6to4 carrying 10.1.2.3
    "http://[2002:a9fe:a9fe::]/hook",  # 6to4 carrying the metadata service
    "http://[64:ff9b::7f00:1]/hook",  # NAT64
    "http://[::127.0.0.1]/hook",  # IPv4-compatible
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo, client 127.0.0.1
]


def form(url: str) -> EndpointForm:
    return EndpointForm(
        data={"name": "n", "url": url, "format": "json", "event_kinds": ["run_stopped"], "secret": "s" * 20, "active": True}
    )


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_it_refuses_each_non_public_address_class_in_the_form(url: str, settings: Settings) -> None:
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = []
    endpoint_form = form(url)
    assert not endpoint_form.is_valid()
    assert "webhooks go only to public addresses" in endpoint_form.errors["url"][0]


@pytest.mark.django_db
def test_it_accepts_a_public_address_and_allowed_hosts_in_the_form(settings: Settings) -> None:
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["hooks.internal", "10.0.0.0/8"]
    assert form("https://93.184.215.14/hook").is_valid()
    assert form("http://10.1.2.3/hook").is_valid()
    assert not form("http://192.168.1.1/hook").is_valid()
    assert "must not carry credentials" in form("http://user:pw@93.184.215.14/").errors["url"][0]


@pytest.mark.django_db
def test_it_refuses_at_delivery_a_name_that_resolves_to_loopback_and_keeps_no_answer(
    settings: Settings,
    receiver: Receiver,  # noqa: F811
    operator: User,
) -> None:
    url, seen = receiver.url, receiver.requests
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = []
    port = url.split(":")[2].split("/")[0]
    hook = WebhookEndpoint.objects.create(name="h", url=f"http://localhost:{port}/hook", event_kinds=["approval_requested"])
    waiting_run(operator)
    delivery = Delivery.objects.get(endpoint=hook)
    assert services.attempt(str(delivery.pk)).status == "failed"
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.next_retry_at is None and seen == []
    assert "resolves to 127.0.0.1, a loopback address" in delivery.last_error
    # Allowed: it is sent, and only the status code and timing are kept.
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["localhost"]
    Delivery.objects.filter(pk=delivery.pk).update(status="pending", next_retry_at=delivery.created_at)
    assert services.attempt(str(delivery.pk)).status == "delivered"
    assert len(seen) == 1 and seen[0].headers["Host"] == f"localhost:{port}"
    stored = [str(v) for row in DeliveryAttempt.objects.filter(delivery=delivery).values() for v in row.values()]
    stored += [str(v) for v in Delivery.objects.filter(pk=delivery.pk).values().get().values()]
    assert not any("answer 200" in value for value in stored)  # the receiver's body


@pytest.mark.django_db
def test_it_connects_to_the_address_it_checked_not_a_second_lookup(
    settings: Settings,
    receiver: Receiver,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    operator: User,
) -> None:
    url, seen = receiver.url, receiver.requests
    port = int(url.split(":")[2].split("/")[0])
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1/32"]
    answers = iter(["127.0.0.1", "192.0.2.1", "192.0.2.1"])  # a rebinding name: checked, then elsewhere
    lookups: list[str] = []

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Answers:
        if host != "hooks.example.com":
            return real(host, *args, **kwargs)
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    real = socket.getaddrinfo
    monkeypatch.setattr("notifications.destinations.socket.getaddrinfo", rebinding)
    hook = WebhookEndpoint.objects.create(name="h", url=f"http://hooks.example.com:{port}/hook", event_kinds=["approval_requested"])
    waiting_run(operator)
    delivery = Delivery.objects.get(endpoint=hook)
    assert services.attempt(str(delivery.pk)).status == "delivered"
    assert lookups == ["hooks.example.com"] and seen[0].headers["Host"] == f"hooks.example.com:{port}"


def refused(url: str) -> bool:
    try:
        destinations.check_destination(url)
    except destinations.DestinationRefused:
        return True
    return False


SPECIAL_V4 = [
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "0.0.0.0/8",
    "224.0.0.0/4",
    "240.0.0.0/4",
]
IPV4 = st.one_of(
    st.ip_addresses(v=4),
    st.tuples(st.sampled_from(SPECIAL_V4), st.integers(0, 2**32 - 1)).map(
        lambda pick: (net := ipaddress.IPv4Network(pick[0]))[pick[1] % net.num_addresses]
    ),
)
BITS = st.integers(0, 2**80 - 1)


def carriers(v4: ipaddress.IPv4Address, bits: int) -> dict[str, ipaddress.IPv6Address]:
    """Every IPv6 form that carries ``v4``; ``bits`` fills the parts each leaves free."""
    n, public = int(v4), int(ipaddress.IPv4Address("8.8.8.8"))
    teredo = (0x2001_0000 << 96) | ((bits & 0xFFFF_FFFF) << 32)  # flags and the obfuscated port
    forms = {
        "6to4": ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | bits),
        "NAT64": ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | n),
        "IPv4-compatible": ipaddress.IPv6Address(n),
        "IPv4-mapped": ipaddress.IPv6Address((0xFFFF << 32) | n),
        # Teredo's client address is stored inverted.
        "Teredo server": ipaddress.IPv6Address(teredo | (n << 64) | (~public & 0xFFFF_FFFF)),
        "Teredo client": ipaddress.IPv6Address(teredo | (public << 64) | (~n & 0xFFFF_FFFF)),
    }
    if n == 1:
        del forms["IPv4-compatible"]  # ::1 is the loopback address, which an entry may allow
    return forms


@pytest.mark.django_db
@given(IPV4, BITS, st.sampled_from([[], ["10.0.0.0/8"], ["2002::/16", "64:ff9b::/96", "2001::/32", "::/96"], ["127.0.0.1/32"]]))
@example(ipaddress.IPv4Address("0.0.0.0"), 0, ["::/96"])  # [::] reaches this host as 0.0.0.0 does
def test_it_refuses_every_ipv6_form_carrying_an_address_it_refuses(v4: ipaddress.IPv4Address, bits: int, allowed: list[str]) -> None:
    with override_settings(HARNESS_WEBHOOK_ALLOWED_HOSTS=allowed):
        if not refused(f"http://{v4}/hook"):
            return
        for form, v6 in carriers(v4, bits).items():
            assert refused(f"http://[{v6}]/hook"), (form, str(v6), allowed)


@pytest.mark.django_db
def test_it_accepts_a_6to4_address_of_a_public_or_allowed_one(settings: Settings) -> None:
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = []
    assert destinations.check_destination("http://[2002:808:808::1]/hook").address == "2002:808:808::1"
    with pytest.raises(destinations.DestinationRefused, match=r"a 6to4 address carrying 10\.1\.2\.3, a private address"):
        destinations.check_destination("http://[2002:a01:203::]/hook")
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["10.0.0.0/8"]
    assert not refused("http://[2002:a01:203::]/hook")
    # Allowing the IPv6 range itself does not allow what its addresses carry.
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["64:ff9b::/96"]
    assert not refused("http://[64:ff9b::808:808]/hook")
    with pytest.raises(destinations.DestinationRefused, match=r"a NAT64 address carrying 127\.0\.0\.1, a loopback address"):
        destinations.check_destination("http://[64:ff9b::7f00:1]/hook")


@pytest.mark.django_db
def test_it_refuses_at_delivery_a_name_that_resolves_to_a_6to4_loopback(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, operator: User
) -> None:
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = []
    real = socket.getaddrinfo

    def six_to_four(host: str, *args: Any, **kwargs: Any) -> Answers:
        if host != "hooks.example.com":
            return real(host, *args, **kwargs)
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2002:7f00:1::", 80, 0, 0))]

    monkeypatch.setattr("notifications.destinations.socket.getaddrinfo", six_to_four)
    hook = WebhookEndpoint.objects.create(name="h", url="http://hooks.example.com/hook", event_kinds=["approval_requested"])
    waiting_run(operator)
    delivery = Delivery.objects.get(endpoint=hook)
    assert services.attempt(str(delivery.pk)).status == "failed"
    delivery.refresh_from_db()
    assert "resolves to 2002:7f00:1::, a 6to4 address carrying 127.0.0.1, a loopback address" in delivery.last_error
