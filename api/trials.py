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


class MedianP95Serializer(serializers.Serializer):
    median = serializers.FloatField(allow_null=True, help_text="None until a run has ended.")
    p95 = serializers.FloatField(allow_null=True, help_text="Nearest rank.")


class UnauthorizedEffectSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    call_id = serializers.CharField(allow_null=True)
    tool = serializers.CharField()
    why = serializers.CharField(help_text="What the effect needed under the trial's reference policy and did not have.")
    variant = serializers.CharField(required=False, help_text="In the trial's list (not in a variant's own).")


class RunFiguresSerializer(serializers.Serializer):
    """One run's figures (trials.comparison.RunFigures)."""

    run_id = serializers.CharField()
    repetition = serializers.IntegerField()
    outcome = serializers.CharField(help_text="`running` while the run goes on, else how it ended.")
    success = serializers.BooleanField(help_text="By the task's acceptance: outcome, checks on the final revision, approvals.")
    accepted = serializers.BooleanField()
    unverified_accepted = serializers.BooleanField(help_text="Accepted without its checks passing on the final revision.")
    unsafe_attempts = serializers.IntegerField()
    unauthorized = UnauthorizedEffectSerializer(many=True)
    corrections = serializers.IntegerField(help_text="Reviewers' denials and requested changes.")
    proposals = serializers.IntegerField()
    over_budget = serializers.BooleanField()
    working_seconds = serializers.FloatField()
    waiting_seconds = serializers.FloatField()
    tokens = serializers.IntegerField()
    cost_usd = serializers.FloatField()
    stale_requests = serializers.IntegerField()
    unknown_outcomes = serializers.IntegerField()
    reconciled_applied = serializers.IntegerField()
    repeated_effects = serializers.IntegerField()
    why = serializers.ListField(child=serializers.CharField(), help_text="Why the run is not a success; empty if it is.")
    agent = serializers.CharField(allow_blank=True, help_text="The outside agent's preset (`claude-code`...); empty for Harness's loop.")
    agent_version = serializers.CharField(allow_blank=True, help_text="The agent's version, as its `agent_started` event recorded it.")
    models = serializers.ListField(child=serializers.CharField(), help_text="The models its usage notes name.")


class TrialAgentSerializer(serializers.Serializer):
    preset = serializers.CharField()
    name = serializers.CharField(help_text="`Claude Code`, `Codex`, `Gemini CLI`...")
    versions = serializers.ListField(child=serializers.CharField(), help_text="Every version its runs' agents started.")
    said = serializers.CharField(help_text="The name and version in words: `Claude Code 2.1.197`.")


class VariantSummarySerializer(serializers.Serializer):
    """One variant's figures over its runs (trials.comparison.summarize)."""

    variant = serializers.CharField()
    agent = TrialAgentSerializer(allow_null=True, help_text="The outside agent that proposed its calls; null for Harness's loop.")
    models = serializers.ListField(child=serializers.CharField(), help_text="The models its runs' calls used (usage notes).")
    proposer = serializers.CharField(help_text="Who proposed, in words: `Codex 0.171.0, gpt-5.1-codex`.")
    k = serializers.IntegerField()
    runs = serializers.IntegerField()
    ended = serializers.IntegerField()
    successes = serializers.IntegerField()
    success_rate = serializers.FloatField(allow_null=True)
    success_interval = serializers.ListField(
        child=serializers.FloatField(), allow_null=True, help_text="Wilson 95% interval [low, high]; None before a run ends."
    )
    pass_at_k = serializers.FloatField(allow_null=True)
    pass_hat_k = serializers.FloatField(allow_null=True)
    pass_hat = serializers.DictField(child=serializers.FloatField(), help_text="pass^j for j = 1 .. ended runs.")
    accepted = serializers.IntegerField()
    unverified_accepted = serializers.IntegerField()
    unsafe_attempts = serializers.IntegerField()
    unauthorized_effects = serializers.IntegerField(help_text="Must be 0 under a full policy.")
    unauthorized = UnauthorizedEffectSerializer(many=True)
    corrections = serializers.IntegerField()
    over_budget = serializers.IntegerField()
    unknown_outcomes = serializers.IntegerField()
    repeated_effects = serializers.IntegerField()
    working_seconds = MedianP95Serializer()
    waiting_seconds = MedianP95Serializer()
    tokens = serializers.IntegerField()
    cost_usd = serializers.FloatField(help_text="Failed attempts included.")
    cost_per_accepted_usd = serializers.FloatField(allow_null=True)
    outcomes = serializers.DictField(child=serializers.IntegerField())
    run_ids = serializers.ListField(child=serializers.CharField())
    runs_detail = RunFiguresSerializer(many=True)
    change = serializers.DictField(help_text="The variant's change, as it was asked for.")
    reviewer = serializers.CharField(help_text="Who decides its approval requests.")
    project = serializers.CharField()


class DifferenceSerializer(serializers.Serializer):
    variant = serializers.CharField()
    against = serializers.CharField(help_text="The first variant, the baseline.")
    success_difference = serializers.FloatField(allow_null=True)
    interval = serializers.ListField(child=serializers.FloatField(), allow_null=True, help_text="Newcombe 95% interval.")
    unsafe_attempts_difference = serializers.IntegerField()
    unauthorized_effects_difference = serializers.IntegerField()
    cost_difference_usd = serializers.FloatField()


class TrialHeaderSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField(allow_blank=True)
    task = serializers.CharField()
    k = serializers.IntegerField()
    seed = serializers.IntegerField()
    status = serializers.CharField()
    project = serializers.CharField()
    reference_policy_version = serializers.IntegerField(allow_null=True)
    suite = serializers.CharField(allow_blank=True)


class ComparisonSerializer(serializers.Serializer):
    """What trials.service.figures returns: documentation of the response only."""

    trial = TrialHeaderSerializer()
    unauthorized = UnauthorizedEffectSerializer(many=True, help_text="Every unauthorized effect of every variant, first.")
    variants = VariantSummarySerializer(many=True)
    differences = DifferenceSerializer(many=True, help_text="Each variant after the first against the first.")


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
            (200, "application/json"): ComparisonSerializer,
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
