"""Requests to the Docker engine, counted at the transport: every HTTP request any
docker-py client in this process sends (docker-py's adapters are requests'
``HTTPAdapter``s; their ``send`` is where a request leaves for the socket), by method
and path, the exec and container ids replaced by ``{id}``. The product's code is not
touched: the count is of what reaches the wire, whoever sends it.

    with counting() as seen:
        run_check(...)
    seen.total, seen.by_path

``counting(this_thread=True)`` counts only what the calling thread sends (not, say,
the container pool refilling itself in the background meanwhile)."""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests.adapters

_ID = re.compile(r"/[0-9a-f]{64}(?=/|$)")
_VERSION = re.compile(r"^/v\d+\.\d+")


@dataclass
class Requests:
    by_path: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def total(self) -> int:
        return sum(self.by_path.values())

    def add(self, method: str, url: str) -> None:
        path = _ID.sub("/{id}", _VERSION.sub("", urlsplit(url).path))
        with self.lock:
            self.by_path[f"{method} {path}"] += 1


@contextmanager
def counting(*, this_thread: bool = False) -> Iterator[Requests]:
    seen = Requests()
    original = requests.adapters.HTTPAdapter.send
    counted = threading.get_ident() if this_thread else None

    def send(adapter: requests.adapters.HTTPAdapter, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        if counted is None or threading.get_ident() == counted:
            seen.add(request.method or "?", request.url or "")
        return original(adapter, request, *args, **kwargs)

    requests.adapters.HTTPAdapter.send = send  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        requests.adapters.HTTPAdapter.send = original  # type: ignore[method-assign]
