"""Model errors, classified the same way for every provider, and the retry policy:
429/5xx/timeouts/connection failures are retried with backoff, anything else stops the
run ``model_error``."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Literal


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_seconds: float = 1.0
    max_seconds: float = 60.0

    def backoff(self, retry: int, retry_after: float | None) -> float:
        """Seconds before retry number ``retry`` (1-based). A provider's retry-after
        wins: retrying sooner would only be refused again."""
        if retry_after is not None:
            return max(0.0, retry_after)
        return float(min(self.base_seconds * 2.0 ** (retry - 1), self.max_seconds))


Category = Literal["rate_limited", "server_error", "timeout", "connection", "auth", "bad_request", "other"]


@dataclass(frozen=True)
class Failure:
    """A provider error, classified the same way for every provider."""

    category: Category
    status: int | None
    message: str
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        return self.category in ("rate_limited", "server_error", "timeout", "connection")


def classify_status(status: int, message: str, headers: Mapping[str, str] | None = None) -> Failure:
    category: Category
    if status == 429:
        category = "rate_limited"
    elif status in (408, 409):
        category = "timeout"
    elif status >= 500:
        category = "server_error"
    elif status in (401, 403):
        category = "auth"
    elif 400 <= status < 500:
        category = "bad_request"
    else:
        category = "other"
    return Failure(category, status, message, retry_after_seconds(headers) if headers is not None else None)


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """``retry-after-ms``, or ``retry-after`` as seconds or an HTTP date (compared with
    the wall clock, since the provider's date is one)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000
        except ValueError:
            value = -1.0
        if math.isfinite(value) and value >= 0:
            return value
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw).timestamp()
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, when - (time.time() if now is None else now))
    return value if math.isfinite(value) and value >= 0 else None


def provider_message(body: object, fallback: str) -> str:
    """The provider's own error message (``{"error": {"message": ...}}`` or the
    unwrapped error object), else the client's text."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str) and inner["message"].strip():
            return str(inner["message"]).strip()
        if isinstance(inner, str) and inner.strip():
            return inner.strip()
    return fallback.strip() or "no message"


@dataclass(frozen=True)
class SdkErrors:
    """An official SDK's error classes. The OpenAI and Anthropic SDKs share their
    shape; a timeout is a kind of connection error in both, so it is tested first."""

    status: type[Exception]
    timeout: type[Exception]
    connection: type[Exception]
    base: type[Exception]

    def classify(self, exc: Exception) -> Failure | None:
        if isinstance(exc, self.status):
            error: Any = exc
            return classify_status(error.status_code, provider_message(error.body, error.message), dict(error.response.headers))
        if isinstance(exc, self.timeout):
            return Failure("timeout", None, "the request timed out")
        if isinstance(exc, self.connection):
            return Failure("connection", None, f"connection error: {exc}")
        if isinstance(exc, self.base):
            return Failure("other", None, f"{type(exc).__name__}: {exc}")
        return None
