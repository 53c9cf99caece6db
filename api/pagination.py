"""Offset pagination with a bounded page size that refuses bad values by name
instead of silently using a default."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_OFFSET = 2**31 - 1


class BoundedPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 200

    def get_limit(self, request: Request) -> int:
        return self._number(request, self.limit_query_param, self.default_limit, 1, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return self._number(request, self.offset_query_param, 0, 0, MAX_OFFSET)

    @staticmethod
    def _number(request: Request, name: str, default: int, lowest: int, highest: int) -> int:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        field = serializers.IntegerField(min_value=lowest, max_value=highest)
        try:
            value: int = field.run_validation(raw)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({name: exc.detail}) from None
        return value

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit, "default": self.default_limit},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        }
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"].update(bounds[parameter["name"]])
        return parameters
