"""Reading an API request's JSON body within bounds. Django refuses a body above
``DATA_UPLOAD_MAX_MEMORY_SIZE`` (api.errors answers that with a 413); this parser
refuses one nested deeper than ``MAX_JSON_DEPTH`` before decoding it. Python's
decoder recurses once per level, so 100,000 levels raise RecursionError (a 500), and
a value just shallow enough to decode still breaks the code that walks it afterwards
(validation, masking, storage), so the bound is far below the interpreter's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import accumulate
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

MAX_JSON_DEPTH = 100

# A JSON string, closed or running unclosed to the end of the text: brackets inside
# strings nest nothing.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in ``text`` (0 for a scalar), in linear time
    and without recursion, so any text within the size limit is measured safely."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets), initial=0))


class BoundedJSONParser(JSONParser):
    def parse(self, stream: IO[bytes], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
            # Nesting needs an opening bracket per level: most bodies are not scanned.
            depth = json_depth(text) if text.count("[") + text.count("{") > MAX_JSON_DEPTH else 0
            if depth > MAX_JSON_DEPTH:
                raise ParseError(f"JSON parse error - arrays and objects nest {depth} levels deep; the limit is {MAX_JSON_DEPTH}")
            return json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        except ValueError as exc:  # not valid in the encoding, or not JSON
            raise ParseError(f"JSON parse error - {exc}") from None
