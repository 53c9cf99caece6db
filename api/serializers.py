"""Request and response shapes. Request serializers check types and bounds and name
the field; the services then check meaning (a contract's tools, a proposer's
kind) and their problems come back under the same field names."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.authtoken.serializers import AuthTokenSerializer

from approvals.models import ApprovalRequest
from core import storable
from core.visible import visible_text
from projects.models import Role
from runs.agent_runs import agent_of
from runs.models import Event, GlobalSwitch, Run
from runs.outcome import code_of, status_of, told
from runs.persistence.published import published
from runs.project_queue import places

# Bounds that keep numbers inside what every database column and index can hold.
MAX_SEQ = 2**31 - 1
EVENT_PAGE_DEFAULT = 100
EVENT_PAGE_MAX = 500


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean only: "false" or 0 in a kill-switch request is a mistake, not a value."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictCharField(serializers.CharField):
    """A JSON string only: DRF would otherwise turn 5 into "5"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        value: str = super().to_internal_value(data)
        return value


@extend_schema_field(OpenApiTypes.OBJECT)
class ObjectField(serializers.JSONField):
    def to_representation(self, value: Any) -> Any:
        # Every value stored is checked on the way in (core.storable); one from
        # before that (or a path that missed it) is shown escaped rather than make the
        # whole page it is on an error for everyone.
        try:
            return super().to_representation(storable.escaped(value))
        except storable.Unstorable:
            return {"summary": storable.summary(value).model_dump()}


# The human-readable fields a serializer names (``words``) with every hidden character
# a mark naming it (core.visible, DESIGN 15); fields returned as data (arguments,
# diffs, effects) keep their exact bytes. A comment, not a docstring: the schema would
# take a docstring for the description of every serializer using it.
class VisibleWords:
    words: tuple[str, ...] = ()

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)  # type: ignore[misc]
        for name in self.words:
            if isinstance(data.get(name), str):
                data[name] = visible_text(data[name])
        return data


class QueuePlaceSerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="1: the next run of the project to start.")
    reason = serializers.CharField(help_text="Why it waits: the project's cap, or its switch.")


class AgentSerializer(serializers.Serializer):
    preset = serializers.CharField(help_text="`claude-code`, `codex`, `gemini-cli`, `mcp-client` or `any`.")
    name = serializers.CharField(help_text="The agent's name in words (`Claude Code`).")
    version = serializers.CharField(allow_null=True, help_text="What its `--version` said when it started; null before.")
    image = serializers.CharField(allow_null=True, help_text="The container image it started from; null before.")
    model = serializers.CharField(allow_null=True, help_text="The model the run chose for it (the model proxy allows only it).")
    ended = serializers.CharField(allow_null=True, help_text="How its process ended, in words; null while it runs.")
    said = serializers.CharField(help_text="Its name and version in words (`Claude Code 2.1.197`).")


def visible_words(data: dict[str, Any], words: tuple[str, ...]) -> dict[str, Any]:
    """``data`` with its ``words`` shown with every hidden character a mark (core.visible)."""
    return {k: visible_text(v) if k in words and isinstance(v, str) else v for k, v in data.items()}


class RunSerializer(VisibleWords, serializers.ModelSerializer):
    words = ("said", "stop_message", "objective")

    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    project = serializers.CharField(source="project.slug", read_only=True, help_text="The slug of the project the run belongs to.")
    policy_version = serializers.IntegerField(source="policy.version", read_only=True)
    contract = ObjectField(read_only=True)
    proposer = ObjectField(read_only=True)
    queue = serializers.SerializerMethodField(
        help_text="For a run waiting in its project's queue: its position (1: next) and why it waits; null otherwise."
    )
    published = serializers.SerializerMethodField(
        help_text="The branch publish pushed and the change request opened, with links to the configured forge's pages."
    )
    status = serializers.SerializerMethodField(
        help_text="`queued` (waiting in its project's queue, not started: see `queue`), `running`, `waiting_approval`,"
        " `complete` or `stopped`."
    )
    outcome = serializers.SerializerMethodField(
        help_text="The outcome's machine name: `queued`, `running`, `waiting_approval`, `complete`, `unpublished` or `partial`"
        " (finished with something the reviewer or the contract asked left undone), or the stop reason."
    )
    said = serializers.SerializerMethodField(
        help_text="The outcome in words, as every page, report, webhook and trace tells it: what happened and what did not."
    )
    agent = serializers.SerializerMethodField(
        help_text="The outside agent that proposes the run's calls (proposer kind `agent`): its preset, name, and the version"
        " and image it started with (null until it started, and for an `mcp-client`); null for Harness's own loop."
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "task_id",
            "objective",
            "project",
            "status",
            "outcome",
            "said",
            "stop_message",
            "revision",
            "proposals",
            "calls",
            "last_seq",
            "kill_requested",
            "queue",
            "policy_version",
            "created_by",
            "created_at",
            "updated_at",
            "contract",
            "proposer",
            "agent",
            "published",
        ]
        read_only_fields = fields

    @extend_schema_field(AgentSerializer(allow_null=True))
    def get_agent(self, run: Run) -> dict[str, Any] | None:
        agent = agent_of(run)
        return None if agent is None else visible_words(agent.as_json(), ("said", "version", "image", "model"))

    def get_status(self, run: Run) -> str:
        return status_of(run)

    def get_outcome(self, run: Run) -> str:
        return code_of(run)

    def get_said(self, run: Run) -> str:
        return told(run).sentence

    @extend_schema_field(QueuePlaceSerializer(allow_null=True))
    def get_queue(self, run: Run) -> dict[str, Any] | None:
        place = places([run]).get(str(run.pk)) if run.queued else None
        return None if place is None else {"position": place.position, "reason": place.reason}

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_published(self, run: Run) -> list[dict[str, Any]]:
        return published(run)


class ModelProxySerializer(serializers.Serializer):
    anthropic = serializers.CharField(help_text="Base URL for Anthropic's Messages API (without `/v1`).")
    openai = serializers.CharField(help_text="Base URL for OpenAI's Chat Completions and Responses (with `/v1`).")
    gemini = serializers.CharField(help_text="Base URL for Gemini's API (without the version).")


class AgentConnectionSerializer(serializers.Serializer):
    mcp_url = serializers.CharField(help_text="The run's MCP endpoint (streamable HTTP).")
    token = serializers.CharField(
        help_text="The run's token, sent as `Authorization: Bearer <token>` (and as the model proxy's API key). Shown in this"
        " answer only: Harness keeps its digest. Valid while the run is running or waiting for a reviewer."
    )
    model_proxy = ModelProxySerializer(help_text="Harness's model proxy for the run, one base URL per provider API.")
    note = serializers.CharField(help_text="What the token opens, and for how long, in words.")


class RunCreatedSerializer(RunSerializer):
    agent_connection = serializers.SerializerMethodField(
        help_text="For a run whose proposer is an outside agent of preset `mcp-client` (Harness starts nothing; the caller"
        " connects any MCP client): its MCP URL and token, given in this answer only, never again. Null otherwise."
    )

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "agent_connection"]
        read_only_fields = fields

    @extend_schema_field(AgentConnectionSerializer(allow_null=True))
    def get_agent_connection(self, run: Run) -> dict[str, Any] | None:
        connection = self.context.get("connection")
        return None if connection is None else dict(connection.as_json())


class RunCreateSerializer(serializers.Serializer):
    contract = serializers.DictField(help_text="The task contract (task_id, objective, workspace, tools, limits...).")
    proposer = serializers.DictField(
        help_text='Who proposes the calls: Harness\'s own loop, {"kind": "scripted", "script": [...]} or a model '
        '({"kind": "openai" | "anthropic", "model": ...}); or an outside agent, {"kind": "agent", "preset": "claude-code" | '
        '"codex" | "gemini-cli" | "mcp-client" | "any", "model": ...} (docs/agents.md). A model or an outside agent may be given '
        "the run's own model budget, \"max_tokens\" and \"max_cost_usd\", under the server's and the project's (an agent's model "
        "calls are refused once it is spent). The contract does not name it: one contract can be run by any proposer."
    )
    project = StrictCharField(
        required=False,
        max_length=60,
        help_text="The slug of the project to start the run in. Default: the only project where you may start runs, else `default`.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # What no database takes (NUL, lone surrogates, nesting past its limit) is
        # refused here, naming the field, before a run holding it is created.
        problems = [p for name in ("contract", "proposer") for p in storable.problems(attrs[name], name)]
        if problems:
            raise serializers.ValidationError({p.field: [p.message] for p in problems})
        return attrs


class RunFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[("queued", "Queued"), *Run.Status.choices],
        required=False,
        help_text="Only runs with this status (`queued`: not admitted yet).",
    )
    task_id = serializers.CharField(max_length=100, required=False, help_text="Only runs of this task.")
    project = serializers.CharField(
        source="project__slug", max_length=60, required=False, help_text="Only runs of this project (its slug)."
    )


class EventSerializer(serializers.ModelSerializer):
    run = serializers.UUIDField(source="run_id", read_only=True)
    type = serializers.CharField(
        read_only=True, help_text="The event type, one name per type (the list and each payload's fields: docs/live_trace.md)."
    )
    payload = ObjectField(read_only=True)

    class Meta:
        model = Event
        fields = ["run", "seq", "type", "call_id", "ts", "payload"]
        read_only_fields = fields


class EventQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(
        min_value=0, max_value=MAX_SEQ, default=0, help_text="Return events with a seq greater than this (0: from the start)."
    )
    limit = serializers.IntegerField(
        min_value=1, max_value=EVENT_PAGE_MAX, default=EVENT_PAGE_DEFAULT, help_text="At most this many events."
    )


class EventPageSerializer(serializers.Serializer):
    events = EventSerializer(many=True)
    next_after = serializers.IntegerField(help_text="Pass as `after` to read on; unchanged when there was nothing new.")
    has_more = serializers.BooleanField(help_text="More events exist after this page right now.")
    run_status = serializers.ChoiceField(choices=Run.Status.choices)


class ApprovalSerializer(VisibleWords, serializers.ModelSerializer):
    words = ("reason",)

    run = serializers.UUIDField(source="run_id", read_only=True)
    args = ObjectField(read_only=True)
    evidence = serializers.ListField(child=ObjectField(), read_only=True)
    effect = ObjectField(
        read_only=True,
        allow_null=True,
        help_text="An external call's effect, fixed when the request was filed and bound into its key: the commit and branch"
        " of a push, the outbox file of a publish, or the project, branches and text of a change request; null for workspace writes.",
    )
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, allow_null=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, allow_null=True)

    class Meta:
        model = ApprovalRequest
        fields = [
            "id",
            "run",
            "call_id",
            "tool",
            "args",
            "diff",
            "effect",
            "revision",
            "policy_version",
            "rule",
            "evidence",
            "status",
            "requested_by",
            "created_at",
            "expires_at",
            "decided_by",
            "decided_at",
            "reason",
            "consumed_at",
        ]
        read_only_fields = fields


class ApprovalFilterSerializer(serializers.Serializer):
    run = serializers.UUIDField(required=False, help_text="Only requests of this run.")
    status = serializers.ChoiceField(choices=ApprovalRequest.Status.choices, required=False, help_text="Only requests with this status.")


class DenySerializer(serializers.Serializer):
    reason = StrictCharField(max_length=2000, help_text="Why; shown to the run's operator and kept in the audit trail.")


class ChangesSerializer(serializers.Serializer):
    message = StrictCharField(max_length=4000, help_text="The reviewer's words to the model, shown to it as a reviewer's, not as policy.")


class SwitchSerializer(serializers.ModelSerializer):
    class Meta:
        model = GlobalSwitch
        fields = ["stop_all", "admit_new", "changed_by", "changed_at"]
        read_only_fields = fields


class SwitchUpdateSerializer(serializers.Serializer):
    stop_all = StrictBooleanField(required=False, help_text="true kills every active run now, and any run that starts while on.")
    admit_new = StrictBooleanField(required=False, help_text="false refuses new runs.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("Give stop_all, admit_new or both.")
        return attrs


class SwitchChangeSerializer(SwitchSerializer):
    killed = serializers.IntegerField(help_text="How many active runs this change asked to stop.")

    class Meta(SwitchSerializer.Meta):
        fields = [*SwitchSerializer.Meta.fields, "killed"]
        read_only_fields = fields


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send as `Authorization: Token <token>`. Shown only here: the server keeps its hash.")
    expires_at = serializers.DateTimeField(help_text="After this the token is refused; ask for a new one.")


class TokenCredentialsSerializer(AuthTokenSerializer):
    """The credentials, and optionally the one project and role the token is narrowed to:
    a role the user holds in that project."""

    # What the user holds is checked by ``narrowed_project``, once the credentials are.

    project = serializers.SlugField(required=False, help_text="Narrow the token to this project (with `role`).")
    role = serializers.ChoiceField(choices=Role.choices, required=False, help_text="Narrow the token to this role (with `project`).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("project" in attrs) != ("role" in attrs):
            raise serializers.ValidationError({"project" if "role" in attrs else "role": ["Give a project and a role together."]})
        return dict(super().validate(attrs))
