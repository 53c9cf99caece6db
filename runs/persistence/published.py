"""What a run put out into the world, for its page and the API: the branch a publish
pushed and the change request a call opened (or that a lookup found). Which tools
reach outside comes from the registry; what each put out is read from the receipt's
data (a change request's always names the forge's project, a push's only its branch).

Links go only to the configured forge's web pages (``HARNESS_FORGE_WEB_URL``): a URL
a forge answered with, or a receipt's text, never becomes a link elsewhere."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from core import events as ev
from core.tools import BUILTIN_TOOLS
from runs.models import Event, Receipt, Run
from sandbox.public import ForgeAccess

OUTSIDE_EFFECTS = tuple(spec.name for spec in BUILTIN_TOOLS if spec.external_effect)


def _branch_href(forge: ForgeAccess | None, remote: str, branch: str) -> str:
    """The branch's page, when the remote is the forge's (or the project is configured)."""
    if forge is None or not (forge.project or urlsplit(remote).hostname == urlsplit(forge.web_url).hostname):
        return ""
    return forge.web_link(forge.branch_link(forge.project_of(remote), branch))


def _object(value: object) -> dict[str, Any]:
    """A JSON object of the receipt's, or an empty one for a value that is none."""
    return value if isinstance(value, dict) else {}


def published(run: Run) -> list[dict[str, Any]]:
    forge = ForgeAccess.from_settings(settings, with_token=False)
    rows = Event.objects.filter(run=run, type=ev.type_name(ev.EffectReconciled), payload__applied=True)
    reconciled = {
        event.call_id: event.detail for event in (row.typed() for row in rows) if isinstance(event, ev.EffectReconciled) and event.call_id
    }
    shown: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for stored in (
        Receipt.objects.filter(run=run, valid=True, body__tool__in=OUTSIDE_EFFECTS).order_by("event_seq").values_list("body", flat=True)
    ):
        body = _object(stored)
        data = _object(body.get("data"))
        done = body.get("status") == "ok" and not data.get("error")
        call_id = str(body.get("call_id", ""))
        if not (done or call_id in reconciled):
            continue
        if "project" in data or isinstance(data.get("change_request"), dict):
            request = _object(data.get("change_request"))
            # A request whose answer was lost is known from the lookup that found it.
            url = str(request.get("url") or reconciled.get(call_id, "").rpartition(": ")[2])
            item: dict[str, Any] = {
                "kind": "change_request",
                "number": request.get("number"),
                "title": str(request.get("title", "")),
                "source": str(request.get("source", data.get("branch", ""))),
                "target": str(request.get("target", "")),
                "url": url,
                "href": forge.web_link(url) if forge is not None else "",
            }
        elif isinstance(data.get("branch"), str):
            item = {
                "kind": "branch",
                "branch": data["branch"],
                "remote": str(data.get("remote", "")),
                "commit": str(data.get("commit", ""))[:12],
                "href": _branch_href(forge, str(data.get("remote", "")), data["branch"]),
            }
        else:
            continue
        key = (item["kind"], str(item.get("branch") or item.get("url")))
        if key not in seen:
            seen.add(key)
            shown.append(item)
    return shown
