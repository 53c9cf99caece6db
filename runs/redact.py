"""Secrets never reach stored events: configured secret values and well-known
credential shapes are replaced before anything is written."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.conf import settings

MASK = "[redacted]"
CREDENTIAL_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,})"
)


def secret_values() -> list[str]:
    values: Iterable[str] = getattr(settings, "HARNESS_SECRET_VALUES", [])
    return sorted((v for v in values if len(v) >= 8), key=len, reverse=True)


def redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return CREDENTIAL_PATTERNS.sub(MASK, text)


def redact(value: Any, secrets: list[str] | None = None) -> Any:
    secrets = secret_values() if secrets is None else secrets
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {redact_text(str(k), secrets): redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    return value
