"""Loopback stand-ins for the forges' REST APIs, the way ``fake_providers`` serves
the model adapters: an HTTP server on 127.0.0.1 that speaks GitHub's pulls API
(``/repos/{owner}/{repo}``, ``/repos/{owner}/{repo}/pulls``) or GitLab's merge
requests API (``/api/v4/projects/:id``, ``.../merge_requests``), keeps the requests
it has opened, and records every request (method, raw path, headers, JSON body).

Faults: ``drop_create_answer`` opens the request and closes the connection without
answering (as a lost response would); ``hold_seconds`` waits before that (a
client's timeout fires first); ``refuse`` answers a create with a status and body."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, quote, urlsplit

FORGE_TOKEN = "ghp-loopback-forge-token-7d1e"


@dataclass
class Recorded:
    method: str
    path: str  # as sent, still URL-encoded
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


class FakeForge:
    def __init__(self, kind: Literal["github", "gitlab"], project: str, default_branch: str = "main") -> None:
        self.kind = kind
        self.project = project
        self.default_branch = default_branch
        self.requests: list[Recorded] = []
        self.opened: list[dict[str, Any]] = []
        self.drop_create_answer = False
        self.hold_seconds = 0.0
        self.refuse: tuple[int, dict[str, Any]] | None = None
        self._lock = threading.Lock()
        forge = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                forge._serve(self)

            def do_POST(self) -> None:
                forge._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        """What HARNESS_FORGE_API_URL names: GitHub's REST root, GitLab's instance."""
        return f"{self.base}/api/v3" if self.kind == "github" else self.base

    @property
    def web_url(self) -> str:
        return f"{self.base}/web"

    def __enter__(self) -> FakeForge:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def posts(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST"]

    # -- serving ---------------------------------------------------------------------

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("content-length") or 0)
        raw = req.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        parts = urlsplit(req.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        headers = {k.lower(): v for k, v in req.headers.items()}
        with self._lock:
            self.requests.append(Recorded(req.command, parts.path, query, headers, body))
            if not self._authorised(headers):
                return self._answer(req, 401, {"message": "Bad credentials" if self.kind == "github" else "401 Unauthorized"})
            route = self._routes().get((req.command, parts.path))
            if route is None:
                return self._answer(req, 404, {"message": "Not Found"})
            if req.command == "POST" and self.refuse is not None:
                return self._answer(req, *self.refuse)
            status, answer = route(query, body)
            drop = req.command == "POST" and self.drop_create_answer
        if drop:
            # The forge acted; its answer never arrives.
            time.sleep(self.hold_seconds)
            req.close_connection = True
            return None
        return self._answer(req, status, answer)

    def _authorised(self, headers: dict[str, str]) -> bool:
        if self.kind == "github":
            return headers.get("authorization") == f"token {FORGE_TOKEN}"
        return headers.get("private-token") == FORGE_TOKEN

    def _answer(self, req: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        req.send_response(status)
        req.send_header("content-type", "application/json")
        req.send_header("content-length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def _routes(self) -> dict[tuple[str, str], Any]:
        if self.kind == "github":
            repo = f"/api/v3/repos/{self.project}"
            return {("GET", repo): self._gh_repo, ("GET", f"{repo}/pulls"): self._gh_list, ("POST", f"{repo}/pulls"): self._gh_create}
        project = f"/api/v4/projects/{quote(self.project, safe='')}"
        return {
            ("GET", project): self._gl_project,
            ("GET", f"{project}/merge_requests"): self._gl_list,
            ("POST", f"{project}/merge_requests"): self._gl_create,
        }

    # GitHub: https://docs.github.com/en/rest/pulls/pulls
    def _gh_repo(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        owner, name = self.project.split("/", 1)
        return 200, {
            "id": 4242,
            "name": name,
            "full_name": self.project,
            "owner": {"login": owner},
            "default_branch": self.default_branch,
            "url": f"{self.api_url}/repos/{self.project}",
            "html_url": f"{self.web_url}/{self.project}",
        }

    def _gh_list(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        owner = self.project.split("/", 1)[0]
        found = [p for p in self.opened if p["state"] == query.get("state", "open") and f"{owner}:{p['head']['ref']}" == query.get("head")]
        return 200, found

    def _gh_create(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        owner = self.project.split("/", 1)[0]
        if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in self.opened):
            error = {"resource": "PullRequest", "code": "custom", "message": f"A pull request already exists for {owner}:{body['head']}."}
            return 422, {"message": "Validation Failed", "errors": [error]}
        number = len(self.opened) + 1
        pull = {
            "number": number,
            "state": "open",
            "title": body["title"],
            "body": body.get("body"),
            "url": f"{self.api_url}/repos/{self.project}/pulls/{number}",
            "html_url": f"{self.web_url}/{self.project}/pull/{number}",
            "head": {"ref": body["head"], "label": f"{owner}:{body['head']}"},
            "base": {"ref": body["base"], "label": f"{owner}:{body['base']}"},
        }
        self.opened.append(pull)
        return 201, pull

    # GitLab: https://docs.gitlab.com/api/merge_requests/
    def _gl_project(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        return 200, {
            "id": 77,
            "path_with_namespace": self.project,
            "default_branch": self.default_branch,
            "web_url": f"{self.web_url}/{self.project}",
        }

    def _gl_list(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        state = query.get("state", "all")
        return 200, [m for m in self.opened if m["source_branch"] == query.get("source_branch") and state in ("all", m["state"])]

    def _gl_create(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if any(m["source_branch"] == body["source_branch"] and m["state"] == "opened" for m in self.opened):
            return 409, {"message": [f"Another open merge request already exists for this source branch: !{self.opened[0]['iid']}"]}
        iid = len(self.opened) + 1
        merge_request = {
            "id": 1000 + iid,
            "iid": iid,
            "project_id": 77,
            "state": "opened",
            "title": body["title"],
            "description": body.get("description"),
            "source_branch": body["source_branch"],
            "target_branch": body["target_branch"],
            "web_url": f"{self.web_url}/{self.project}/-/merge_requests/{iid}",
        }
        self.opened.append(merge_request)
        return 201, merge_request
