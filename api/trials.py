"""Trials through the API (docs/design.md, Trials): list and start them, one trial
with its progress, its comparison as JSON or CSV, and stopping it. Each is found
under the permission its project's runs need (projects.access.scoped): another
project's trial is 404, as one that does not exist."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from api.pagination import BoundedPagination
from api.serializers import DetailSerializer, StrictCharField
from api.views import COMMON, FORBIDDEN, NOT_FOUND, TOO_LARGE, UNAUTHENTICATED, ApiView, body
from common import permissions
from projects.access import permissions_in, scoped
from trials import report
from trials.models import Trial
from trials.service import create_trial, figures, progress, stop_trial, tend


class TrialCreateSerializer(serializers.Serializer):
    task = serializers.DictField(help_text="The task: {contract, acceptance?, name?}; acceptance says what success is (trials.spec).")
    variants = serializers.ListField(
        child=serializers.DictField(),
        help_text="Each a named change: {name, proposer, model?, policy?, limits?, ablate?, reviewer?} (docs/design.md, Trials).",
    )
    k = serializers.IntegerField(min_value=1, max_value=200, help_text="Repetitions per variant.")
    project = StrictCharField(required=False, max_length=60, help_text="The slug of the trial's project.")
    name = StrictCharField(required=False, max_length=120, allow_blank=True)
    seed = serializers.IntegerField(required=False, default=0, help_text="Seeds each repetition (a stochastic proposer's draw).")


class TrialSerializer(serializers.ModelSerializer):
    project: serializers.SlugRelatedField = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Trial
        fields = ["id", "name", "project", "k", "seed", "suite", "status", "stop_message", "created_at", "ended_at", "progress"]

    def get_progress(self, trial: Trial) -> dict[str, Any]:
        return progress(trial)


class ComparisonQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=["json", "csv"], required=False, default="json")


def trial_rows(request: Request) -> Any:
    return scoped(Trial.objects.select_related("project"), request.user, permissions.VIEW_RUNS)


def trial_by_id(request: Request, raw: str) -> Trial:
    """A malformed id is as unknown as a missing one: 404 either way."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise NotFound()
    trial: Trial = get_object_or_404(trial_rows(request), pk=int(raw))
    return trial


def trial_parameter() -> OpenApiParameter:
    return OpenApiParameter("trial_id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The trial's id.")


class TrialList(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS, "POST": permissions.ADD_RUNS}
    pagination_class = BoundedPagination
    serializer_class = TrialSerializer

    @extend_schema(operation_id="trials_list", summary="List trials, newest first", responses={200: TrialSerializer(many=True), **COMMON})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(trial_rows(request).order_by("-created_at", "id"))
        return self.get_paginated_response(TrialSerializer(page, many=True).data)

    @extend_schema(
        operation_id="trials_create",
        summary="Start a trial: k runs of one task under each variant",
        request=TrialCreateSerializer,
        responses={
            201: TrialSerializer,
            **COMMON,
            409: OpenApiResponse(DetailSerializer, description="The switch admits no new runs."),
            413: TOO_LARGE,
        },
    )
    def post(self, request: Request) -> Response:
        data = body(TrialCreateSerializer, request)
        with transaction.atomic():
            trial = create_trial(
                task=data["task"],
                variants=data["variants"],
                k=data["k"],
                actor=request.user,
                project=data.get("project"),
                name=data.get("name", ""),
                seed=data.get("seed", 0),
            )
        return Response(TrialSerializer(trial).data, status=status.HTTP_201_CREATED)


class TrialDetail(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS}

    @extend_schema(
        operation_id="trials_retrieve",
        summary="One trial and how far its runs are",
        parameters=[trial_parameter()],
        responses={200: TrialSerializer, 401: UNAUTHENTICATED, 403: FORBIDDEN, 404: NOT_FOUND},
    )
    def get(self, request: Request, trial_id: str) -> Response:
        return Response(TrialSerializer(tend(trial_by_id(request, trial_id))).data)


class TrialComparison(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS}
    query_serializers = {"GET": ComparisonQuerySerializer}

    @extend_schema(
        operation_id="trials_comparison",
        summary="The trial's comparison, from its runs' events",
        description="Per variant: success with its Wilson 95% interval, pass^k and pass@k, unsafe attempts, unauthorized "
        "effects (listed first, each with its run), human corrections, working and waiting time (median, p95), tokens and "
        "cost including failed attempts, cost per accepted result; the differences from the first variant. "
        "`?format=csv`: one row per run.",
        parameters=[trial_parameter(), ComparisonQuerySerializer],
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "text/csv"): OpenApiTypes.STR,
            400: COMMON[400],
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
    )
    def get(self, request: Request, trial_id: str) -> Response | HttpResponse:
        trial = tend(trial_by_id(request, trial_id))
        result = figures(trial)
        if self.query()["format"] == "csv":
            response = HttpResponse(report.csv_text(result), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="trial-{trial.pk}.csv"'
            return response
        return Response(result)


class TrialStop(ApiView):
    required_permissions = {"POST": permissions.OPERATE_RUNS}

    @extend_schema(
        operation_id="trials_stop",
        summary="Stop a trial: its runs still going are killed",
        parameters=[trial_parameter()],
        request=None,
        responses={202: TrialSerializer, 401: UNAUTHENTICATED, 403: FORBIDDEN, 404: NOT_FOUND},
    )
    def post(self, request: Request, trial_id: str) -> Response:
        trial = trial_by_id(request, trial_id)
        if permissions.OPERATE_RUNS not in permissions_in(request.user, trial.project_id):
            raise PermissionDenied("you are not an operator of this trial's project")
        stop_trial(trial, request.user.get_username())
        return Response(TrialSerializer(trial).data, status=status.HTTP_202_ACCEPTED)
