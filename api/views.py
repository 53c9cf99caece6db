"""The JSON API: thin wrappers over the same services the pages and commands use.
Permissions are the pages' (see api.permissions); refusals become HTTP answers in
api.errors."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from api import permissions as perms
from api.models import ApiToken, NarrowingRefused, check_narrowing
from api.pagination import BoundedPagination
from api.parsers import MAX_JSON_DEPTH, BoundedJSONParser
from api.serializers import (
    ApprovalFilterSerializer,
    ApprovalSerializer,
    ChangesSerializer,
    DenySerializer,
    DetailSerializer,
    EventPageSerializer,
    EventQuerySerializer,
    EventSerializer,
    RunCreatedSerializer,
    RunCreateSerializer,
    RunFilterSerializer,
    RunSerializer,
    SwitchChangeSerializer,
    SwitchSerializer,
    SwitchUpdateSerializer,
    TokenCredentialsSerializer,
    TokenSerializer,
)
from approvals.models import ApprovalRequest
from common import permissions, signin
from live.artifacts import run_has_artifact, stream_masked
from live.trace import ARTIFACT_REF
from projects.access import scoped
from runs import control
from runs.agent_runs import start_run
from runs.approval_flow.flow import deny, grant, request_changes
from runs.models import Artifact, GlobalSwitch, Run
from runs.services import report_of

FIELD_MESSAGES = {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}
FIELD_ERRORS = OpenApiResponse(
    FIELD_MESSAGES,
    description="Bad input: each key names a field (`contract.limits.max_attempts`; `body` for malformed JSON "
    f"or JSON nested deeper than {MAX_JSON_DEPTH} levels; `request` for more parameters than the server reads).",
)
TOO_LARGE = OpenApiResponse(
    FIELD_MESSAGES,
    description="The body is larger than the server takes (`DATA_UPLOAD_MAX_MEMORY_SIZE`, 2.5 MB unless configured); "
    "`body` gives its size and the limit.",
)
UNAUTHENTICATED = OpenApiResponse(DetailSerializer, description="No valid token or session.")
FORBIDDEN = OpenApiResponse(DetailSerializer, description="Logged in without the permission this action needs.")
NOT_FOUND = OpenApiResponse(DetailSerializer, description="No such object.")
COMMON = {400: FIELD_ERRORS, 401: UNAUTHENTICATED, 403: FORBIDDEN}


def id_parameter(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(name, OpenApiTypes.UUID, OpenApiParameter.PATH, description=f"The {what}'s id.")


def by_id(queryset: QuerySet, raw: str) -> Any:
    """A malformed id is as unknown as a missing one: 404 either way."""
    try:
        pk = uuid.UUID(raw)
    except ValueError:
        raise NotFound() from None
    return get_object_or_404(queryset, pk=pk)


def body(serializer_class: type, request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class ApiView(GenericAPIView):
    permission_classes = [perms.MethodPermission]
    required_permissions: dict[str, str] = {}
    # The serializer of each method's query parameters; pagination adds its own to GET.
    query_serializers: dict[str, type] = {}

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if not hasattr(self, (request.method or "").lower()):
            return  # the handler lookup answers 405
        # A misspelt filter (`?stauts=`) would otherwise quietly list everything.
        serializer = self.query_serializers.get(self.method)
        known = set(serializer().fields) if serializer else set()
        if self.pagination_class is not None and self.method == "GET":
            paginator = self.pagination_class()
            assert isinstance(paginator, BoundedPagination)  # the API has one pagination style
            known |= {paginator.limit_query_param, paginator.offset_query_param}
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            raise ValidationError({name: ["Unknown query parameter."] for name in unknown})

    @property
    def method(self) -> str:
        """The method whose rules apply: HEAD is answered by GET."""
        return "GET" if self.request.method == "HEAD" else str(self.request.method)

    def query(self) -> dict[str, Any]:
        # A plain dict, not the QueryDict: DRF reads an empty form value as "not
        # given", and `?status=` is a mistake to report, not a request for everything.
        serializer = self.query_serializers[self.method](data=self.request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)


class RunList(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS, "POST": permissions.ADD_RUNS}
    query_serializers = {"GET": RunFilterSerializer}
    pagination_class = BoundedPagination
    serializer_class = RunSerializer

    @extend_schema(
        operation_id="runs_list",
        summary="List runs, newest first",
        parameters=[RunFilterSerializer],
        responses={200: RunSerializer(many=True), **COMMON},
    )
    def get(self, request: Request) -> Response:
        filters = self.query()
        # ``status`` as told (runs.outcome.status_of): a queued run is not running.
        told = filters.pop("status", None)
        if told is not None:
            filters |= {"status": Run.Status.RUNNING, "queued": True} if told == "queued" else {"status": told}
            if told == Run.Status.RUNNING:
                filters["queued"] = False
        runs = (
            scoped(Run.objects.select_related("policy", "created_by", "project"), request.user, permissions.VIEW_RUNS)
            .filter(**filters)
            .order_by("-created_at", "id")
        )
        page = self.paginate_queryset(runs)
        return self.get_paginated_response(RunSerializer(page, many=True).data)

    @extend_schema(
        operation_id="runs_create",
        summary="Create a run from a contract and start it",
        request=RunCreateSerializer,
        description="A run whose proposer is an outside agent of preset `mcp-client` is answered with its MCP URL and token"
        " (`agent_connection`), in this answer only.",
        responses={
            201: RunCreatedSerializer,
            **COMMON,
            409: OpenApiResponse(DetailSerializer, description="The global switch admits no new runs."),
            413: TOO_LARGE,
        },
    )
    def post(self, request: Request) -> Response:
        data = body(RunCreateSerializer, request)
        # One transaction: a contract whose workspace cannot be prepared leaves no run
        # behind, and the worker is only told about a run that was committed.
        # An mcp-client run's token is minted in it too (runs.agent_runs.start_run).
        with transaction.atomic():
            run, connection = start_run(data["contract"], data["proposer"], request.user, project=data.get("project"))
        response = Response(RunCreatedSerializer(run, context={"connection": connection}).data, status=status.HTTP_201_CREATED)
        if connection is not None:
            response["Cache-Control"] = "no-store"  # the token is in this answer only
        return response


class RunDetail(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS}

    @extend_schema(
        operation_id="runs_retrieve",
        summary="One run",
        parameters=[id_parameter("run_id", "run")],
        responses={200: RunSerializer, 401: UNAUTHENTICATED, 403: FORBIDDEN, 404: NOT_FOUND},
    )
    def get(self, request: Request, run_id: str) -> Response:
        return Response(
            RunSerializer(
                by_id(scoped(Run.objects.select_related("policy", "created_by", "project"), request.user, permissions.VIEW_RUNS), run_id)
            ).data
        )


class RunEvents(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS}
    query_serializers = {"GET": EventQuerySerializer}

    @extend_schema(
        operation_id="runs_events",
        summary="A run's events after a seq, oldest first",
        description="Read the whole log by passing each page's `next_after` as `after` until `has_more` is false. "
        "Events are append-only and numbered without gaps, so this never misses or repeats one.",
        parameters=[id_parameter("run_id", "run"), EventQuerySerializer],
        responses={200: EventPageSerializer, **COMMON, 404: NOT_FOUND},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = by_id(scoped(Run.objects.all(), request.user, permissions.VIEW_RUNS), run_id)
        page = self.query()
        rows = list(run.events.filter(seq__gt=page["after"]).order_by("seq")[: page["limit"] + 1])
        events = rows[: page["limit"]]
        return Response(
            {
                "events": EventSerializer(events, many=True).data,
                "next_after": events[-1].seq if events else page["after"],
                "has_more": len(rows) > page["limit"],
                "run_status": run.status,
            }
        )


class RunReport(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS}

    @extend_schema(
        operation_id="runs_report",
        summary="A run's machine-readable report (final, or so far)",
        parameters=[id_parameter("run_id", "run")],
        responses={200: OpenApiTypes.OBJECT, 401: UNAUTHENTICATED, 403: FORBIDDEN, 404: NOT_FOUND},
    )
    def get(self, request: Request, run_id: str) -> Response:
        return Response(report_of(by_id(scoped(Run.objects.all(), request.user, permissions.VIEW_RUNS), run_id)))


class RunArtifact(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS}

    @extend_schema(
        operation_id="runs_artifact",
        summary="One of a run's artifacts (check output, a large tool result, a published patch), masked",
        description="Streamed from the artifact store with secrets masked a line at a time, as the run's page "
        "serves it. Only an artifact the run's receipts or evidence name is served.",
        parameters=[
            id_parameter("run_id", "run"),
            OpenApiParameter("ref", OpenApiTypes.STR, OpenApiParameter.PATH, description="`sha256:<hex>`, as a receipt names it."),
        ],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
    )
    def get(self, request: Request, run_id: str, ref: str) -> StreamingHttpResponse:
        run = by_id(scoped(Run.objects.all(), request.user, permissions.VIEW_RUNS), run_id)
        if not ARTIFACT_REF.fullmatch(ref) or not run_has_artifact(run, ref) or not Artifact.objects.filter(ref=ref).exists():
            raise NotFound()
        return stream_masked(request._request, ref)


class RunKill(ApiView):
    required_permissions = {"POST": permissions.OPERATE_RUNS}

    @extend_schema(
        operation_id="runs_kill",
        summary="Kill a run",
        description="The run stops `killed` at its next guard; an execution in flight is terminated. "
        "Asking again while the kill is on its way is accepted again.",
        parameters=[id_parameter("run_id", "run")],
        request=None,
        responses={
            202: RunSerializer,
            401: UNAUTHENTICATED,
            403: FORBIDDEN,
            404: NOT_FOUND,
            409: OpenApiResponse(DetailSerializer, description="The run has already finished."),
            413: TOO_LARGE,
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = by_id(scoped(Run.objects.all(), request.user, permissions.VIEW_RUNS), run_id)
        flagged = control.kill(run, request.user)
        run = Run.objects.select_related("policy", "created_by", "project").get(pk=run.pk)
        if not flagged and run.status not in control.ACTIVE:
            return Response({"detail": f"the run has already finished ({run.outcome})"}, status=status.HTTP_409_CONFLICT)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class ApprovalList(ApiView):
    required_permissions = {"GET": permissions.VIEW_APPROVALS}
    query_serializers = {"GET": ApprovalFilterSerializer}
    pagination_class = BoundedPagination
    serializer_class = ApprovalSerializer

    @extend_schema(
        operation_id="approvals_list",
        summary="List approval requests, newest first",
        parameters=[ApprovalFilterSerializer],
        responses={200: ApprovalSerializer(many=True), **COMMON},
    )
    def get(self, request: Request) -> Response:
        filters = self.query()
        if "run" in filters:
            filters["run_id"] = filters.pop("run")
        requests = (
            scoped(approval_rows(), request.user, permissions.VIEW_APPROVALS, "run__project_id")
            .filter(**filters)
            .order_by("-created_at", "id")
        )
        page = self.paginate_queryset(requests)
        return self.get_paginated_response(ApprovalSerializer(page, many=True).data)


def approval_rows() -> QuerySet[ApprovalRequest]:
    return ApprovalRequest.objects.select_related("requested_by", "decided_by")


class ApprovalDetail(ApiView):
    required_permissions = {"GET": permissions.VIEW_APPROVALS}

    @extend_schema(
        operation_id="approvals_retrieve",
        summary="One approval request",
        parameters=[id_parameter("approval_id", "approval request")],
        responses={200: ApprovalSerializer, 401: UNAUTHENTICATED, 403: FORBIDDEN, 404: NOT_FOUND},
    )
    def get(self, request: Request, approval_id: str) -> Response:
        return Response(
            ApprovalSerializer(
                by_id(scoped(approval_rows(), request.user, permissions.VIEW_APPROVALS, "run__project_id"), approval_id)
            ).data
        )


REFUSED = OpenApiResponse(
    DetailSerializer,
    description="The decision was refused: already decided, expired, stale (the revision or policy changed), "
    "or you started this run (separation of duties).",
)


def decided(approval: ApprovalRequest) -> Response:
    return Response(ApprovalSerializer(approval_rows().get(pk=approval.pk)).data)


def to_decide(request: Request, approval_id: str) -> ApprovalRequest:
    """The request a decision names, among those of the user's projects (404 otherwise)."""
    found = scoped(ApprovalRequest.objects.select_related("run__policy"), request.user, permissions.VIEW_APPROVALS, "run__project_id")
    approval: ApprovalRequest = by_id(found, approval_id)
    return approval


class ApprovalGrant(ApiView):
    required_permissions = {"POST": permissions.DECIDE_APPROVALS}

    @extend_schema(
        operation_id="approvals_grant",
        summary="Grant an approval request",
        description="Grants exactly the call, arguments and revision shown in the request; the run uses it once.",
        parameters=[id_parameter("approval_id", "approval request")],
        request=None,
        responses={200: ApprovalSerializer, 401: UNAUTHENTICATED, 403: FORBIDDEN, 404: NOT_FOUND, 409: REFUSED, 413: TOO_LARGE},
    )
    def post(self, request: Request, approval_id: str) -> Response:
        approval = to_decide(request, approval_id)
        grant(approval, request.user)
        return decided(approval)


class ApprovalDeny(ApiView):
    required_permissions = {"POST": permissions.DECIDE_APPROVALS}

    @extend_schema(
        operation_id="approvals_deny",
        summary="Deny an approval request (a reason is required)",
        description="The run stops `denied` with the reason; the same request is not presented again.",
        parameters=[id_parameter("approval_id", "approval request")],
        request=DenySerializer,
        responses={200: ApprovalSerializer, **COMMON, 404: NOT_FOUND, 409: REFUSED, 413: TOO_LARGE},
    )
    def post(self, request: Request, approval_id: str) -> Response:
        approval = to_decide(request, approval_id)
        data = body(DenySerializer, request)
        deny(approval, request.user, data["reason"])
        return decided(approval)


class ApprovalRequestChanges(ApiView):
    required_permissions = {"POST": permissions.DECIDE_APPROVALS}

    @extend_schema(
        operation_id="approvals_request_changes",
        summary="Request changes instead of the call (a message is required)",
        description="The call is not performed; the run goes on and the model reads the message as a reviewer's words. "
        "The identical call is not asked for again.",
        parameters=[id_parameter("approval_id", "approval request")],
        request=ChangesSerializer,
        responses={200: ApprovalSerializer, **COMMON, 404: NOT_FOUND, 409: REFUSED, 413: TOO_LARGE},
    )
    def post(self, request: Request, approval_id: str) -> Response:
        approval = to_decide(request, approval_id)
        data = body(ChangesSerializer, request)
        request_changes(approval, request.user, data["message"])
        return decided(approval)


class Switch(ApiView):
    required_permissions = {"GET": permissions.VIEW_RUNS, "POST": permissions.OPERATE_RUNS}

    @extend_schema(
        operation_id="switch_retrieve",
        summary="The global kill switch",
        responses={200: SwitchSerializer, 401: UNAUTHENTICATED, 403: FORBIDDEN},
    )
    def get(self, request: Request) -> Response:
        return Response(SwitchSerializer(GlobalSwitch.get()).data)

    @extend_schema(
        operation_id="switch_update",
        summary="Turn the global kill switch",
        description="A field left out keeps its current value. `stop_all: true` kills every active run now.",
        request=SwitchUpdateSerializer,
        responses={200: SwitchChangeSerializer, **COMMON, 413: TOO_LARGE},
    )
    def post(self, request: Request) -> Response:
        change = body(SwitchUpdateSerializer, request)
        current = GlobalSwitch.get()
        killed = control.set_global(
            request.user,
            stop_all=change.get("stop_all", current.stop_all),
            admit_new=change.get("admit_new", current.admit_new),
        )
        return Response({**SwitchSerializer(GlobalSwitch.get()).data, "killed": killed})


class Token(GenericAPIView):
    """Trade a username and password for a new API token. The token is in this answer
    only (the server keeps its hash); it expires after ``HARNESS_API_TOKEN_DAYS``, an
    admin can revoke it, and a change of the user's password voids it. Narrowed to a
    project and a role the user holds there, it acts only there, as that role."""

    # Only the credentials in the body count here, not a header or a session.
    authentication_classes = ()
    permission_classes = ()
    parser_classes = (FormParser, MultiPartParser, BoundedJSONParser)
    serializer_class = TokenCredentialsSerializer

    @extend_schema(
        operation_id="auth_token",
        summary="Get a new API token",
        auth=[],
        request=TokenCredentialsSerializer,
        responses={
            200: TokenSerializer,
            400: FIELD_ERRORS,
            413: TOO_LARGE,
            429: OpenApiResponse(
                DetailSerializer, description="Too many failed attempts for this user from this address; see Retry-After."
            ),
            503: OpenApiResponse(DetailSerializer, description="Attempts cannot be counted right now, so none is checked."),
        },
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        username = str(request.data.get("username") or "") if isinstance(request.data, dict) else ""
        address = signin.client_address(request)
        try:
            return signin.limited_sign_in(username, address, lambda: self._issue(request), ValidationError)
        except signin.SignInLocked as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_429_TOO_MANY_REQUESTS, headers={"Retry-After": str(exc.retry_after)})
        except NarrowingRefused as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        except signin.SignInUnavailable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": str(exc.retry_after)})

    def _issue(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = check_narrowing(data["user"], data.get("project"), data.get("role"))
        row, token = ApiToken.issue(data["user"], project, data.get("role", ""))
        return Response(TokenSerializer({"token": token, "expires_at": row.expires_at}).data)
