"""An external agent's model calls, as the model proxy (gateway.model_proxy) records
them and as budgets count them.

Each call the proxy forwards becomes a ``model_note`` event of kind ``usage`` in the
run's log, with the fields a built-in adapter's note has (adapters.conversation:
provider, model, input and output tokens, cost, the run's totals and budget) and
``via: "model proxy"``; a refusal (a spent budget, a model the run did not choose) or
a provider's failure is a ``model_note`` of kind ``budget_exhausted``, ``refused`` or
``error``. ``model_note`` changes nothing of the run's state (core.fold), so the proxy
writes it from the web process while a worker drives the run, behind the run row's
lock (``RowLock``, like a reviewer's decision), and the worker's next checkpoint only
numbers its own events after it: nothing is lost, and the live trace shows the call as
soon as it is stored (the doorbell rings after the commit).

The log is where an external agent's usage lives: each proxy note carries the run's
running totals, written under the run row's lock (``totals`` reads the newest), and a project's budgets add them to what its built-in runs
checkpointed (runs.budgets.usage_of, through ``newest_proxy_note``). An AgentProposer
therefore does not count model usage itself (it never sees the traffic) and must not
put these totals under its snapshot's ``usage`` (they would be counted twice); it may
show them (``totals(run_id).to_json()``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery

from adapters.pricing import Budget, Price, UsageTotals, parse_price_table, price_for
from core import events as ev
from core.fences import RowLock
from core.jsonutil import JSON
from runs.models import Event, Run
from runs.persistence.eventlog import append_events

VIA = "model proxy"
FENCE = RowLock("the model proxy")
NOTE = ev.type_name(ev.ModelNote)
# The note's fields as its class names them: the proxy notes are looked up in the
# database (``_notes``, the newest note of each run in the statement that reads the
# runs), where no typed note is at hand.
KIND = ev.field_name(ev.ModelNote, "kind")
DETAIL = ev.field_name(ev.ModelNote, "detail")


@dataclass(frozen=True)
class ModelCall:
    """One request the proxy forwarded, as the provider answered it."""

    provider: str  # anthropic, openai, gemini
    api: str  # messages, chat_completions, responses, generate_content
    model: str
    status: int  # the provider's HTTP status (0: no answer at all)
    duration_ms: int
    stream: bool
    input_tokens: int | None = None  # None: the answer carried no usage numbers
    output_tokens: int | None = None
    error: str = ""  # what went wrong, for a call that failed (never the provider's key)
    agent: str = ""  # the agent's User-Agent, bounded


@dataclass(frozen=True)
class Spent:
    """Which budget a request would cross: ``limit`` is tokens or cost, ``by`` whose."""

    limit: str
    message: str
    detail: dict[str, JSON]


def allowed_models(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The models an external agent of a run with this proposer configuration may call:
    the ``model`` and ``models`` it names, else every model the server's price table
    names (``HARNESS_MODEL_PRICES`` without ``"*"``). A dated variant of an allowed model
    is allowed (``claude-sonnet-4-5`` allows ``claude-sonnet-4-5-20250929``), as the
    price table prices it."""
    named: list[str] = []
    if isinstance(config.get("model"), str) and config["model"]:
        named.append(config["model"])
    extra = config.get("models")
    if isinstance(extra, list):
        named += [m for m in extra if isinstance(m, str) and m]
    if named:
        return tuple(dict.fromkeys(named))
    return tuple(name for name in prices() if name != "*")


def model_allowed(model: str, allowed: Sequence[str]) -> bool:
    return any(model == name or model.startswith(name + "-") for name in allowed)


def prices() -> dict[str, Price]:
    return parse_price_table(settings.HARNESS_MODEL_PRICES)


def price(model: str) -> Price | None:
    return price_for(model, prices())


def run_budget(run: Run, now: datetime | None = None) -> Budget:
    """The run's model budget, as a built-in model run's (runs.proposers): its own
    ``max_tokens`` / ``max_cost_usd``, under the server's caps, under what is left of
    its project's daily and monthly budgets (runs.budgets.project_bound)."""
    from runs.budgets import project_bound

    return own_budget(run).intersect(project_bound(run, now or datetime.now(UTC)))


def own_budget(run: Run) -> Budget:
    """The run's own ``max_tokens`` / ``max_cost_usd`` under the server's caps."""
    from runs.proposers import server_budget

    config = run.proposer if isinstance(run.proposer, dict) else {}
    max_tokens, max_cost = server_budget()
    own = Budget(_positive(config.get("max_tokens")), _positive(config.get("max_cost_usd")))
    return own.intersect(Budget(max_tokens, max_cost, "the server's", "the server's"))


def _positive(value: object) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _notes(events: QuerySet[Event]) -> QuerySet[Event]:
    return events.filter(type=NOTE, **{f"payload__{KIND}": "usage", f"payload__{DETAIL}__via": VIA}).order_by("-seq")


def totals(run_id: uuid.UUID | str) -> UsageTotals:
    """What the run's external agent has used through the proxy so far: the running
    totals its newest proxy note carries (one read from the end of its log, whatever
    its length)."""
    return proxy_totals(_notes(Event.objects.filter(run_id=run_id)).values_list("payload", flat=True).first())


def newest_proxy_note() -> Subquery:
    """A run's newest proxy note's payload (or None), to annotate runs with: read in
    the statement that reads the runs."""
    return Subquery(_notes(Event.objects.filter(run=OuterRef("pk"))).values("payload")[:1])


def proxy_totals(note: object) -> UsageTotals:
    """The running totals a proxy note's payload carries (none without one)."""
    detail = note.get(DETAIL) if isinstance(note, dict) else None
    if not isinstance(detail, dict):
        return UsageTotals()
    return UsageTotals(
        requests=_count(detail.get("request")),
        input_tokens=_count(detail.get("total_input_tokens")),
        output_tokens=_count(detail.get("total_output_tokens")),
        cost_usd=float(detail.get("total_cost_usd") or 0.0),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def spent(run: Run, used: UsageTotals, budget: Budget) -> Spent | None:
    """The budget the run has used up, if any: a request is refused once the tokens or
    the cost recorded reach the limit (one request in flight may cross it, as a built-in
    run's last request may)."""
    if budget.max_tokens is not None and used.tokens >= budget.max_tokens:
        whose = budget.tokens_by or "the run's"
        return Spent(
            "tokens",
            f"{whose} token budget is spent: {used.tokens} of {budget.max_tokens} tokens used over {used.requests} model requests",
            {"limit": "tokens", "by": whose, "used_tokens": used.tokens, "max_tokens": budget.max_tokens},
        )
    if budget.max_cost_usd is not None and used.cost_usd >= budget.max_cost_usd:
        whose = budget.cost_by or "the run's"
        return Spent(
            "cost",
            f"{whose} cost budget is spent: ${used.cost_usd:.4f} of ${budget.max_cost_usd} used over {used.requests} model requests",
            {"limit": "cost", "by": whose, "used_cost_usd": round(used.cost_usd, 8), "max_cost_usd": budget.max_cost_usd},
        )
    return None


def check(run: Run, now: datetime | None = None) -> tuple[Budget, Spent | None]:
    """The run's budget now and whether it is spent (read before forwarding a request):
    the run's proxy totals and what its project's other runs used in the windows of its
    budgets, in one statement (``run.project`` is the one its token's query joined)."""
    from runs.budgets import bound, others_in, usage_of, windows

    project = run.project
    opened = windows(project, now or datetime.now(UTC))
    others = others_in(project.pk, opened, str(run.pk))
    which = Q(pk=run.pk) if others is None else Q(pk=run.pk) | others
    own, rows = UsageTotals(), []
    for pk, created_at, used, proxied in usage_of(Run.objects.filter(which)):
        if pk == str(run.pk):
            own = proxied
        else:
            rows.append((created_at, used))
    budget = own_budget(run).intersect(bound(project, opened, rows))
    return budget, spent(run, own, budget)


def record(run_id: uuid.UUID | str, call: ModelCall, budget: Budget | None = None) -> dict[str, JSON]:
    """Store ``call`` as the run's ``model_note`` (kind ``usage``, or ``error`` for a
    call the provider did not answer with a success) and return its detail. Under the
    run row's lock, so the totals it carries count every call before it. ``budget`` is
    the one the request was admitted under (read again if not given)."""
    cost_price = price(call.model)
    estimated = call.input_tokens is None or call.output_tokens is None
    input_tokens, output_tokens = call.input_tokens or 0, call.output_tokens or 0
    cost = cost_price.cost(input_tokens, output_tokens) if cost_price is not None else None
    base: dict[str, JSON] = {
        "via": VIA,
        "provider": call.provider,
        "api": call.api,
        "model": call.model,
        "status": call.status,
        "stream": call.stream,
        "duration_ms": call.duration_ms,
    }
    if call.agent:
        base["agent"] = call.agent[:200]
    answered = 200 <= call.status < 300
    if not answered and call.input_tokens is None and call.output_tokens is None:
        detail = {**base, "message": call.error[:500] or f"the provider answered {call.status}"}
        _append(run_id, "error", detail)
        return detail
    with transaction.atomic():
        # The run row's lock first: two calls of one agent finishing at once each count
        # the other. Its newest note is read in the statement that takes the lock.
        locked = Run.objects.select_for_update().only("pk", "proposer", "project_id", "created_at")
        run = locked.annotate(proxy_note=newest_proxy_note()).get(pk=run_id)
        before = proxy_totals(run.proxy_note)
        budget = budget or run_budget(run)
        detail = {
            **base,
            "request": before.requests + 1,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_usd": round(cost, 8) if cost is not None else None,
            "estimated": estimated,
            "total_tokens": before.tokens + input_tokens + output_tokens,
            "total_cost_usd": round(before.cost_usd + (cost or 0.0), 8),
            "total_input_tokens": before.input_tokens + input_tokens,
            "total_output_tokens": before.output_tokens + output_tokens,
            "max_tokens": budget.max_tokens,
            "max_cost_usd": budget.max_cost_usd,
        }
        if call.error:
            detail["message"] = call.error[:500]
        _append(run_id, "usage", detail)
    return detail


def refusal(run_id: uuid.UUID | str, kind: str, message: str, detail: Mapping[str, JSON]) -> None:
    """A request the proxy refused (``budget_exhausted``, ``refused``), on the run's record."""
    _append(run_id, kind, {"via": VIA, "message": message, **detail})


def _append(run_id: uuid.UUID | str, kind: str, detail: dict[str, JSON]) -> None:
    event = ev.ModelNote(run_id=str(run_id), seq=0, ts=time.time(), kind=kind, detail=detail)
    append_events(str(run_id), [event], fence=FENCE)


def notes_of(run_id: uuid.UUID | str) -> Iterable[ev.ModelNote]:
    """The run's proxy notes in order (for tests and the report)."""
    for row in Event.objects.filter(run_id=run_id, type=NOTE).order_by("seq"):
        typed = row.typed()
        if isinstance(typed, ev.ModelNote) and typed.detail.get("via") == VIA:
            yield typed
