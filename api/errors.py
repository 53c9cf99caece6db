"""Refusals from the services as HTTP answers. Bad input is a 400 whose keys name
the offending fields with the request body's own paths (``contract.limits.max_attempts``);
a refused decision or a run that cannot take the action is a 409 with the reason.
Django's own limits on a request are answered in the same JSON shapes, naming the
limit, rather than as its HTML "Bad Request" page."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from rest_framework import status
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from approvals.checks import DecisionForbidden, DecisionRefused
from core.errors import InputError
from runs.control import ControlRefused

# Which request body field each kind of InputError is about; the services name
# fields relative to the object they checked.
BODY_FIELD = {"contract": "contract", "workspace": "contract", "proposer": "proposer"}
ADMISSION = "run"


def body_field(what: str, field: str) -> str:
    base = BODY_FIELD.get(what)
    if base is None or field == base or field.startswith((f"{base}.", f"{base}[")):
        return field
    if field == "(root)":
        return base
    return f"{base}{field}" if field.startswith("[") else f"{base}.{field}"


def input_error_body(exc: InputError) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for problem in exc.problems:
        fields.setdefault(body_field(exc.what, problem.field), []).append(problem.message)
    return fields


def flat_fields(detail: Any, path: str = "") -> dict[str, list[str]]:
    """DRF's nested errors as one level, ``{"a.b[0]": ["message"]}``: every 400 has the
    same shape, whatever part of the request was wrong."""
    if isinstance(detail, dict):
        fields: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = str(key) if not path else (f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
            for field, messages in flat_fields(value, name).items():
                fields.setdefault(field, []).extend(messages)
        return fields
    if isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        fields = {}
        for index, item in enumerate(detail):
            for field, messages in flat_fields(item, f"{path}[{index}]").items():
                fields.setdefault(field, []).extend(messages)
        return fields
    messages = detail if isinstance(detail, list) else [detail]
    return {path or "non_field_errors": [str(message) for message in messages]}


def too_big(context: dict[str, Any]) -> Response:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    size = context["request"].META.get("CONTENT_LENGTH")
    told = f"is {size} bytes, more than" if size else "is larger than"
    message = f"the request body {told} the limit of {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)"
    return Response({"body": [message]}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)


def too_many_parts(exc: TooManyFieldsSent | TooManyFilesSent) -> Response:
    if isinstance(exc, TooManyFieldsSent):
        message = f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} parameters (DATA_UPLOAD_MAX_NUMBER_FIELDS)"
    else:
        message = f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files (DATA_UPLOAD_MAX_NUMBER_FILES)"
    return Response({"request": [message]}, status=status.HTTP_400_BAD_REQUEST)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        return too_big(context)
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return too_many_parts(exc)
    if isinstance(exc, ParseError):
        return Response({"body": [str(exc.detail)]}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ValidationError):
        return Response(flat_fields(exc.detail), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, InputError):
        if exc.what == ADMISSION:
            return Response({"detail": "; ".join(p.message for p in exc.problems)}, status=status.HTTP_409_CONFLICT)
        return Response(input_error_body(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DecisionForbidden):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, DecisionRefused):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, ControlRefused):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    return drf_exception_handler(exc, context)
