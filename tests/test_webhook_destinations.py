"""Webhooks reach only public addresses unless HARNESS_WEBHOOK_ALLOWED_HOSTS allows
others: refused in the admin form and again at delivery (a name resolving to 127.0.0.1
included), the connection pinned to the checked address, and only the status code
and timing of the answer kept, never its body."""

from __future__ import annotations

import socket

import pytest

from notifications import destinations, services
from notifications.admin import EndpointForm
from notifications.models import Delivery, DeliveryAttempt, WebhookEndpoint
from tests.test_webhooks import receiver, waiting_run  # noqa: F401 - receiver: the loopback HTTP receiver fixture

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
]


def form(url: str) -> EndpointForm:
    return EndpointForm(
        data={"name": "n", "url": url, "format": "json", "event_kinds": ["run_stopped"], "secret": "s" * 20, "active": True}
    )


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_it_refuses_each_non_public_address_class_in_the_form(url, settings):
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = []
    endpoint_form = form(url)
    assert not endpoint_form.is_valid()
    assert "webhooks go only to public addresses" in endpoint_form.errors["url"][0]


@pytest.mark.django_db
def test_it_accepts_a_public_address_and_allowed_hosts_in_the_form(settings):
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["hooks.internal", "10.0.0.0/8"]
    assert form("https://93.184.215.14/hook").is_valid()
    assert form("http://10.1.2.3/hook").is_valid()
    assert not form("http://192.168.1.1/hook").is_valid()
    assert "must not carry credentials" in form("http://user:pw@93.184.215.14/").errors["url"][0]


@pytest.mark.django_db
def test_it_refuses_at_delivery_a_name_that_resolves_to_loopback_and_keeps_no_answer(settings, receiver, operator):  # noqa: F811
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
def test_it_connects_to_the_address_it_checked_not_a_second_lookup(settings, receiver, monkeypatch, operator):  # noqa: F811
    url, seen = receiver.url, receiver.requests
    port = int(url.split(":")[2].split("/")[0])
    settings.HARNESS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1/32"]
    answers = iter(["127.0.0.1", "192.0.2.1", "192.0.2.1"])  # a rebinding name: checked, then elsewhere
    lookups: list[str] = []

    def rebinding(host, *args, **kwargs):
        if host != "hooks.example.com":
            return real(host, *args, **kwargs)
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    real = socket.getaddrinfo
    monkeypatch.setattr(destinations.socket, "getaddrinfo", rebinding)
    hook = WebhookEndpoint.objects.create(name="h", url=f"http://hooks.example.com:{port}/hook", event_kinds=["approval_requested"])
    waiting_run(operator)
    delivery = Delivery.objects.get(endpoint=hook)
    assert services.attempt(str(delivery.pk)).status == "delivered"
    assert lookups == ["hooks.example.com"] and seen[0].headers["Host"] == f"hooks.example.com:{port}"
