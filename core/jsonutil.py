"""Canonical JSON and digests: the bytes an approval key or a content address is
computed over must not depend on dict order or whitespace."""

from __future__ import annotations

import hashlib
import json
from typing import Any, TypeAlias

JSON: TypeAlias = Any  # a value that json.dumps accepts; kept loose at the boundary


def canonical_json(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: JSON) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
