"""The model proxy: an external agent's model traffic goes to Harness, never to the
provider (docs/design.md, Model proxy).

Under /agent/runs/<run id>/anthropic, /openai and /gemini it speaks the provider's own
API (Anthropic Messages, OpenAI Chat Completions and Responses, Gemini generateContent;
streamed or not) and, for each request, in order:

1. the run's token (runs.agents.tokens.authenticate, audited): none or an unknown one
   is a 401, another run's a 404, each in the provider's error shape;
2. the request: one the proxy serves, within HARNESS_MODEL_PROXY_MAX_REQUEST_MB, naming a
   model the run allows (runs.agents.usage.allowed_models: the run's own model(s), else
   the price table's); the model lists are answered here with those models;
3. the budget: the run's, under the server's caps and its project's daily and monthly
   budgets (runs.agents.usage.check), refused once spent (read with the token, in one
   trip to the database: ``admit``);
4. forwarded to the provider's configured base URL with the server's key in place of
   the agent's token, hop-by-hop headers and anything carrying the token left out;
   the answer's bytes pass through as they arrive while its usage numbers are read on
   the side (gateway.model_wire);
5. recorded as the run's ``model_note`` (runs.agents.usage.record) once the answer has
   ended and before the agent's response is closed (a stream's last event held back
   until then), so an agent that has its answer finds the call in the trace.

Every refusal of 2 and 3 is on the run's record too; every request is counted in
``harness_model_proxy_requests_total`` by provider and status. Neither the server's key
nor the run's token is logged or stored."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

import httpx2
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from adapters.pricing import Budget
from common import metrics
from gateway import model_wire as wire
from gateway.routing import Receive, Scope, Send, Service, send_json
from runs.agents import tokens, usage
from runs.models import Run

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# The request's headers that stay with this hop or carry the agent's identity: the
# token's (authorization, x-api-key, x-goog-api-key), cookies, and the account headers
# of the agent's own SDK; the server's key is added instead.
_DROPPED_REQUEST = {
    b"host",
    b"connection",
    b"keep-alive",
    b"proxy-authorization",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"content-length",
    b"accept-encoding",
    b"authorization",
    b"x-api-key",
    b"x-goog-api-key",
    b"cookie",
    b"openai-organization",
    b"openai-project",
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"x-real-ip",
    b"forwarded",
}
# The answer's headers left out: hop-by-hop ones, the encoding (the bytes are passed on
# decoded), the provider's cookies.
_DROPPED_RESPONSE = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "transfer-encoding",
    "content-encoding",
    "upgrade",
    "trailer",
    "set-cookie",
    "alt-svc",
}
# Clients built on Stainless' SDKs (anthropic, openai) do not retry an answer that says so.
_NO_RETRY = {"x-should-retry": "false"}

# The proxy's database work runs on threads of its own, each keeping its connection,
# not on Django's one thread for sync code (page views, sockets' sign-ins).
_db_threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="model-proxy")
_clients: dict[int, httpx2.AsyncClient] = {}


async def on_db(call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    def run() -> R:
        try:
            return call(*args, **kwargs)
        except Exception:
            connections[DEFAULT_DB_ALIAS].close()  # the next call opens one afresh
            raise

    return await sync_to_async(run, thread_sensitive=False, executor=_db_threads)()


def _client() -> httpx2.AsyncClient:
    """One pooled client per event loop (Daphne runs one). No proxy from the
    environment, no redirects: the request goes to the configured base URL only."""
    loop = id(asyncio.get_running_loop())
    client = _clients.get(loop)
    if client is None:
        timeout = httpx2.Timeout(connect=10.0, read=float(settings.HARNESS_MODEL_TIMEOUT_SECONDS), write=60.0, pool=30.0)
        limits = httpx2.Limits(max_connections=200, max_keepalive_connections=50, keepalive_expiry=30.0)
        client = _clients[loop] = httpx2.AsyncClient(timeout=timeout, limits=limits, trust_env=False, follow_redirects=False)
    return client


def _upstream(provider: wire.Provider) -> tuple[str, str, str]:
    """(base URL, server key, the key's variable name)."""
    if provider == "anthropic":
        return str(settings.ANTHROPIC_BASE_URL), str(settings.ANTHROPIC_API_KEY), "ANTHROPIC_API_KEY"
    if provider == "openai":
        return str(settings.OPENAI_BASE_URL), str(settings.OPENAI_API_KEY), "OPENAI_API_KEY"
    return str(settings.GEMINI_BASE_URL), str(settings.GEMINI_API_KEY), "GEMINI_API_KEY"


def admit(token: str | None, run_id: uuid.UUID, budgeted: bool) -> tuple[Run | tokens.Refused, tuple[Budget, usage.Spent | None] | None]:
    """The run the token opens (or why not) and, for a request the budget counts, the
    run's budget and whether it is spent: the database's part of admitting a request,
    in one trip to the proxy's database threads."""
    found = tokens.authenticate(token, run_id, where="model proxy")
    if isinstance(found, tokens.Refused) or not budgeted:
        return found, None
    return found, usage.check(found)


class TooLarge(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("the agent went away")
        body += message.get("body", b"")
        if len(body) > limit:
            raise TooLarge
        if not message.get("more_body"):
            return bytes(body)


def _counted(provider: str, status: int) -> None:
    try:
        metrics.MODEL_PROXY_REQUESTS.labels(provider, str(status)).inc()
    except Exception:  # counting never fails a request
        log.warning("could not count a model proxy request", exc_info=True)


class ModelProxy:
    """The proxy of one provider's API, served as a gateway Service."""

    def __init__(self, provider: wire.Provider) -> None:
        self.provider = provider

    async def __call__(self, run_id: uuid.UUID, rest: str, scope: Scope, receive: Receive, send: Send) -> None:
        status = await self._serve(run_id, rest, scope, receive, send)
        _counted(self.provider, status)

    async def _refuse(self, send: Send, refusal: wire.Refusal, message: str) -> int:
        status, body = wire.error(self.provider, refusal, message)
        await send_json(send, status, body, _NO_RETRY)
        return status

    async def _serve(self, run_id: uuid.UUID, rest: str, scope: Scope, receive: Receive, send: Send) -> int:
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", []))
        query: bytes = scope.get("query_string", b"")
        token = wire.token_of(headers, query)
        method = str(scope.get("method", "GET")).upper()
        route = wire.route(self.provider, method, rest)
        found, budgeted = await on_db(admit, token, run_id, route is not None and route.usage)
        if isinstance(found, tokens.Refused):
            said = "no such run" if found.status == 404 else f"the run's token is required ({found.reason})"
            return await self._refuse(send, "not_found" if found.status == 404 else "auth", said)
        run: Run = found
        if route is None:
            return await self._refuse(send, "not_served", f"{method} {rest[:200]} is not served")
        allowed = usage.allowed_models(run.proposer if isinstance(run.proposer, dict) else {})
        if route.listing:
            await send_json(send, 200, wire.listing(self.provider, allowed))
            return 200
        try:
            raw = await _read_body(receive, int(settings.HARNESS_MODEL_PROXY_MAX_REQUEST_MB) * 1024 * 1024)
        except TooLarge:
            return await self._refuse(send, "too_large", f"the request is larger than {settings.HARNESS_MODEL_PROXY_MAX_REQUEST_MB} MB")
        except ConnectionAbortedError:
            return 499
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return await self._refuse(send, "bad_request", "the request body is not JSON")
        if not isinstance(body, dict):
            return await self._refuse(send, "bad_request", "the request body is not a JSON object")
        model = route.model or body.get("model")
        if not isinstance(model, str) or not model:
            return await self._refuse(send, "bad_request", "the request names no model")
        if not usage.model_allowed(model, allowed):
            message = f"model {model[:200]!r} is not one this run may use (allowed: {', '.join(allowed) or 'none'})"
            detail: dict[str, Any] = {"provider": self.provider, "api": route.api, "model": model[:200], "allowed": list(allowed)}
            await on_db(usage.refusal, run_id, "refused", message, detail)
            return await self._refuse(send, "model", message)
        base, key, key_name = _upstream(self.provider)
        if not key:
            return await self._refuse(send, "no_key", f"the server has no {key_name} configured")
        budget = None
        if budgeted is not None:
            budget, spent = budgeted
            if spent is not None:
                detail = {"provider": self.provider, "api": route.api, "model": model, **spent.detail}
                await on_db(usage.refusal, run_id, "budget_exhausted", spent.message, detail)
                return await self._refuse(send, "budget", f"{spent.message}; nothing was sent to the model")
        if wire.ask_for_stream_usage(self.provider, route.api, body):
            raw = json.dumps(body).encode()
        stream = bool(body.get("stream")) or route.stream_in_path
        agent = wire.header(headers, b"user-agent") or ""
        return await self._forward(run_id, route, model, stream, agent, budget, token or "", base, key, headers, query, raw, receive, send)

    async def _forward(
        self,
        run_id: uuid.UUID,
        route: wire.Route,
        model: str,
        stream: bool,
        agent: str,
        budget: Budget | None,
        token: str,
        base: str,
        key: str,
        headers: list[tuple[bytes, bytes]],
        query: bytes,
        raw: bytes,
        receive: Receive,
        send: Send,
    ) -> int:
        outgoing = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in headers
            if name.lower() not in _DROPPED_REQUEST and (not token or token.encode() not in value)
        ]
        outgoing += [*wire.auth_headers(self.provider, key).items(), ("accept-encoding", "gzip, deflate")]
        url = base.rstrip("/") + route.upstream_path
        kept = wire.without_key(query)
        if kept:
            url += "?" + kept
        began = time.monotonic()
        client = _client()
        request = client.build_request("POST", url, content=raw, headers=outgoing)
        try:
            response = await client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            said = f"the provider could not be reached ({type(exc).__name__})"
            if route.usage:
                call = usage.ModelCall(self.provider, route.api, model, 0, _ms(began), stream, error=said, agent=agent)
                await on_db(usage.record, run_id, call, budget)
            return await self._refuse(send, "upstream", said)
        try:
            return await self._relay(run_id, route, model, stream, agent, budget, began, response, receive, send)
        finally:
            await response.aclose()

    async def _relay(
        self,
        run_id: uuid.UUID,
        route: wire.Route,
        model: str,
        stream: bool,
        agent: str,
        budget: Budget | None,
        began: float,
        response: httpx2.Response,
        receive: Receive,
        send: Send,
    ) -> int:
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        # No content-length: the answer ends with its last chunk, after the call is on
        # the record, not when the client has counted the bytes.
        head = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in response.headers.multi_items()
            if name.lower() not in _DROPPED_RESPONSE and name.lower() != "content-length"
        ]
        await send({"type": "http.response.start", "status": response.status_code, "headers": head})
        reader = wire.EventStream(route.api, self.provider)
        kept = bytearray()  # a JSON answer, for its usage numbers (bounded)
        # A stream's last event is held back until the call is on the record: a client
        # may stop reading at it (the openai SDK at ``[DONE]``), before the answer ends.
        held = b""
        gone = asyncio.Event()
        watcher = asyncio.ensure_future(_watch(receive, gone))
        failure = ""
        try:
            async for chunk in response.aiter_bytes():
                if events:
                    reader.feed(chunk)
                    if reader.ended:
                        held += chunk
                        continue
                elif len(kept) <= wire.PARSE_LIMIT:
                    kept += chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if gone.is_set():  # the agent went away: stop paying for an answer nobody reads
                    failure = "the agent closed the connection before the answer ended"
                    break
        except httpx2.HTTPError as exc:
            failure = f"the provider's answer broke off ({type(exc).__name__})"
        finally:
            watcher.cancel()
        found = wire.Usage()
        if events:
            reader.close()
            found = reader.usage
            failure = failure or reader.error
        elif len(kept) <= wire.PARSE_LIMIT and kept:
            with contextlib.suppress(ValueError):  # not JSON: no usage numbers to read
                wire.read_usage(route.api, self.provider, json.loads(bytes(kept)), found)
        status = response.status_code
        if not 200 <= status < 300 and not failure:
            failure = wire.error_message(bytes(kept)) if kept else f"the provider answered {status}"
        if route.usage:
            call = usage.ModelCall(
                self.provider, route.api, model, status, _ms(began), stream, found.input_tokens, found.output_tokens, failure, agent
            )
            try:
                await on_db(usage.record, run_id, call, budget)
            except Exception:
                log.exception("run %s: could not record a model call through the proxy", run_id)
        await send({"type": "http.response.body", "body": held, "more_body": False})
        return status


async def _watch(receive: Receive, gone: asyncio.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


def _ms(began: float) -> int:
    return round((time.monotonic() - began) * 1000)


def services() -> dict[str, Service]:
    """The gateway's model services, one per provider (harness_site.asgi)."""
    return {provider: ModelProxy(provider) for provider in wire.PROVIDERS}
