"""A real SMTP server on loopback (aiosmtpd) that keeps what it receives, and can be
told to refuse the next few mails with a temporary error."""

from __future__ import annotations

import email
from collections.abc import Iterator
from email.message import Message
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.fixtures_web import free_port


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.refusals = 0  # how many of the next mails get ``refusal``
        self.refusal = "451 4.3.0 Try again later"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refusals > 0:
            self.refusals -= 1
            return self.refusal
        message = email.message_from_bytes(envelope.content)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 OK"

    def to(self, address: str) -> list[Message]:
        return [m for m in self.messages if m["To"] == address]


@pytest.fixture
def smtp_inbox(settings: Any) -> Iterator[Inbox]:
    """The server, and the settings that send mail to it."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.HARNESS_MAIL_ENABLED = True
    try:
        yield inbox
    finally:
        controller.stop()
