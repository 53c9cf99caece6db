"""The reviewer's pages: the inbox of pending requests and one request with its
exact diff, arguments, revision, evidence and the run's trace, and grant / deny.
The services decide; a refused decision re-renders the page with the reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest
from common.permissions import DECIDE_APPROVALS, VIEW_APPROVALS
from common.redact import is_masked
from core.effects import PushEffect, parse_effect
from live.trace import EMPTY_OUTPUT_REF, text_args, timeline
from pages.access import require, visible
from pages.diff_review import FEEDBACK_CHARS, LineComment, check_line_comments, feedback_text, requested_changes, stored_comments
from pages.diff_view import ContextRefused, context_lines, files_of, masked_lines, parse
from pages.inbox import inbox_context, remember_next, waiting_for
from pages.summary import egress_text, shown_clocks
from projects.access import scoped
from runs.agent_runs import agent_of
from runs.approval_flow.base_moves import base_move_now
from runs.approval_flow.flow import check_decision_now, deny, grant, request_changes, staleness_now
from runs.approval_flow.shown import Review, review_of
from runs.control import ACTIVE, ControlRefused
from runs.models import Evidence, Run
from runs.persistence.store import load_state
from runs.rerun import check_ask_again, check_rerun

Status = ApprovalRequest.Status
RECENT_DECISIONS = 30


def decision_blocker(request: ApprovalRequest, user: User | AnonymousUser, *, granting: bool = False) -> str | None:
    """Why this user cannot decide (``granting``: grant) this request now, or None.
    Reading a page records nothing: an expired or stale request is recorded when
    someone tries to decide it (or by the beat, at expiry)."""
    try:
        check_decision_now(request, user, granting=granting)
    except DecisionRefused as exc:
        return str(exc)
    return None


def approval_context(request: ApprovalRequest, user: User | AnonymousUser) -> dict[str, Any]:
    blocker = decision_blocker(request, user)
    run = request.run
    run.refresh_from_db()
    state = load_state(run)
    working, waited = shown_clocks(run, state)
    # What the page shows of the request, as the one value a decision's ledger entry
    # records the digest of (runs.approval_flow.shown): the evidence, "If granted" and
    # the secret scan's findings are rendered from it; the diff and arguments are the
    # request's own, which it holds as they are.
    review = review_of(request, run)
    agent = agent_of(run)
    return {
        "req": request,
        "run": run,
        # Which agent asked: an outside one named with its version (issue 41), or Harness's own loop.
        "agent": agent.as_json() if agent is not None else None,
        "working_seconds": working,
        "waited_seconds": waited,
        "blocker": blocker,
        "grant_blocker": blocker or decision_blocker(request, user, granting=True),
        "grants": list(request.grants.select_related("user")),
        "stale": out_of_date(request),
        "asked_again": asked_again(request),
        "changes": told_changes(request) if request.status == Status.CHANGES_REQUESTED else None,
        # What reviewers asked of this run before, so the next request is read beside it.
        "asked_before": [
            told_changes(earlier)
            for earlier in ApprovalRequest.objects.filter(
                run_id=request.run_id, status=Status.CHANGES_REQUESTED, created_at__lt=request.created_at
            )
            .select_related("decided_by")
            .order_by("created_at")
        ],
        "ask_again_blocker": ask_again_blocker(request, user),
        "expiry": after_expiry(request, run, user),
        "revision_current": run.revision == request.revision,
        "evidence": with_network(review),
        "review": review,
        "empty_output": EMPTY_OUTPUT_REF,
        "deny_form": DenyForm(),
        "what_it_does": review.what_it_does,
        "commit_times": commit_times(request.effect),
        "text_args": text_args(request.args),
        # Masking happened before the request was filed (common.redact): say so, so the
        # reviewer knows the [redacted] they read stands for a credential, and whether
        # the run works with the masked value (arguments) or ships the original (a diff).
        "masked_args": is_masked(request.args),
        "masked_lines": masked_lines(request.diff),
        "secret_findings": review.secret_findings,
        "base_move": base_move_now(request),
        "diff_files": files_of(parse(request.diff or "")),
        **timeline(str(run.pk)),
    }


def with_network(review: Review) -> list[Evidence]:
    """The evidence rows, each with where its check connected (``network``, from the
    run's evidence records), so the reviewer sees what a passing check depended on."""
    for row in review.evidence:
        row.network = egress_text(review.egress.get(row.call_id, []))  # type: ignore[attr-defined]
    return review.evidence


def out_of_date(request: ApprovalRequest) -> str | None:
    """Why the request no longer describes what would run: found now for a pending
    one, as recorded for one that lapsed stale; None while it is current."""
    if request.status == Status.PENDING:
        return staleness_now(request)
    return request.reason if request.status == Status.STALE else None


def asked_again(request: ApprovalRequest) -> ApprovalRequest | None:
    """The request the same call filed after this one went stale (its call went back
    through the gates and still asks), for the page to point the reviewer to."""
    if request.status != Status.STALE:
        return None
    later = ApprovalRequest.objects.filter(run_id=request.run_id, call_id=request.call_id, created_at__gt=request.created_at)
    return later.order_by("created_at").first()


def ask_again_blocker(request: ApprovalRequest, user: User | AnonymousUser) -> str | None:
    """Why this user cannot ask again for this request ("" when they can), or None for
    a request that is current or decided, where asking again is no question."""
    if request.status not in (Status.STALE, Status.EXPIRED) and not (request.status == Status.PENDING and out_of_date(request)):
        return None
    try:
        check_ask_again(request, user)
    except ControlRefused as exc:
        return str(exc)
    return ""


def after_expiry(request: ApprovalRequest, run: Run, user: User | AnonymousUser) -> dict[str, Any] | None:
    """For a request that expired (recorded, or due and not yet): whether its run has
    stopped, and once it has, whether this user can re-run it ("" when they can, else
    why not). None for any other request."""
    if not request.has_expired():
        return None
    ended = run.status not in ACTIVE
    rerun_blocker = None
    if ended:
        try:
            check_rerun(run, user)
            rerun_blocker = ""
        except ControlRefused as exc:
            rerun_blocker = str(exc)
    return {"ended": ended, "rerun_blocker": rerun_blocker}


def told_changes(request: ApprovalRequest) -> dict[str, Any]:
    """A request for changes, its words and line comments apart, with who and when."""
    return {"request": request, **requested_changes(request.reason, list(request.comments or []))}


def commit_times(effect: object) -> list[tuple[str, datetime]]:
    """When a push's commit says it was authored and committed: its bytes hold both
    (the commit id binds them), and the page shows them in the viewer's zone, as every
    time on it, rather than in the diff's text."""
    fixed = parse_effect(effect) if effect is not None else None
    if not isinstance(fixed, PushEffect):
        return []
    return [(verb, datetime.fromtimestamp(who.date, tz=UTC)) for verb, who in (("authored", fixed.author), ("committed", fixed.committer))]


def _approval(request: HttpRequest, request_id: str) -> ApprovalRequest:
    found = ApprovalRequest.objects.select_related("run", "run__policy", "requested_by", "decided_by")
    return visible(request, found, VIEW_APPROVALS, "run__project_id", pk=request_id)


@require_GET
@require(VIEW_APPROVALS)
def inbox(request: HttpRequest) -> HttpResponse:
    decided = scoped(ApprovalRequest.objects.exclude(status=Status.PENDING), request.user, VIEW_APPROVALS, "run__project_id")
    recent = decided.select_related("run", "run__project", "decided_by").order_by("-created_at")
    return render(request, "approvals/inbox.html", {**inbox_context(request), "recent": recent[:RECENT_DECISIONS]})


@require_GET
@require(VIEW_APPROVALS)
def pending_count(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"pending": waiting_for(request.user).count()})


@require_GET
@require(VIEW_APPROVALS)
def detail(request: HttpRequest, request_id: str) -> HttpResponse:
    return render(request, "approvals/detail.html", approval_context(_approval(request, request_id), request.user))


@require_GET
@require(VIEW_APPROVALS)
def diff_context(request: HttpRequest, request_id: str) -> HttpResponse:
    """Lines of a file the request's diff leaves out, with their numbers and syntax
    pieces: read from what the request kept of the file at its revision
    (``sources``), never from the run's workspace, which has moved on since."""
    approval = _approval(request, request_id)
    path = request.GET.get("path", "")
    start, end = request.GET.get("start", ""), request.GET.get("end", "")
    if not (start.isdigit() and end.isdigit()):
        return JsonResponse({"error": "start and end must be line numbers"}, status=400)
    try:
        lines = context_lines(approval.diff, approval.sources, path, int(start), int(end))
    except ContextRefused as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"lines": lines})


class DenyForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Why is this denied? The run stops with it."}),
        error_messages={
            "required": "Reason for denying: write why; the run stops with it and the trace keeps it.",
            "max_length": "Reason for denying: at most %(limit_value)d characters (it has %(show_value)d).",
        },
    )


def _shown(request: HttpRequest) -> str | None:
    """The digest of what the page showed the decider, which its forms post back: the
    decision is refused if the request shows something else now (runs.approval_flow.flow)."""
    return request.POST.get("shown", "").strip()[:64] or None


def _refused(request: HttpRequest, approval: ApprovalRequest, error: str) -> HttpResponse:
    """Back to the request's page (GET), so a reload does not send the decision again;
    the refusal is shown in the decision panel."""
    messages.error(request, error, extra_tags="decision")
    return redirect("approvals:detail", approval.pk)


@require_POST
@require(DECIDE_APPROVALS)
def grant_view(request: HttpRequest, request_id: str) -> HttpResponse:
    approval = _approval(request, request_id)
    try:
        grant(approval, request.user, request.POST.get("comment", "")[:2000], shown=_shown(request))
    except DecisionRefused as exc:
        return _refused(request, approval, str(exc))
    approval.refresh_from_db()
    if approval.status == Status.PENDING:
        granted = approval.grants.count()
        messages.success(request, f"Your grant counts: {granted} of {approval.needed} needed; the request waits for the others.")
        return redirect("approvals:detail", approval.pk)
    remember_next(request, approval)
    messages.success(request, f"Granted {approval.tool} for {approval.run.task_id}; the run continues.")
    return redirect("runs:detail", approval.run_id)


@require_POST
@require(DECIDE_APPROVALS)
def deny_view(request: HttpRequest, request_id: str) -> HttpResponse:
    approval = _approval(request, request_id)
    form = DenyForm(request.POST)
    if not form.is_valid():
        # Back to the request's own URL (not /deny/), the problem in the decision panel.
        return _refused(request, approval, " ".join(str(problem) for problem in form.errors["reason"]))
    try:
        deny(approval, request.user, form.cleaned_data["reason"], shown=_shown(request))
    except DecisionRefused as exc:
        return _refused(request, approval, str(exc))
    remember_next(request, approval)
    messages.warning(request, f"Denied {approval.tool} for {approval.run.task_id}; the run stops.")
    return redirect("runs:detail", approval.run_id)


def _feedback(request: HttpRequest, approval: ApprovalRequest) -> tuple[str, list[LineComment], list[str]]:
    """The reviewer's words with their line comments (pages.diff_review), or the problems."""
    post = request.POST
    files = files_of(parse(approval.diff or ""))
    comments, problems = check_line_comments(
        post.getlist("comment_path"), post.getlist("comment_line"), post.getlist("comment_text"), files
    )
    text = feedback_text(post.get("message", ""), comments)
    if len(text) > FEEDBACK_CHARS:
        problems.append(f"the words and line comments together: at most {FEEDBACK_CHARS} characters (they have {len(text)})")
    return text, comments, problems


@require_POST
@require(DECIDE_APPROVALS)
def changes_view(request: HttpRequest, request_id: str) -> HttpResponse:
    approval = _approval(request, request_id)
    text, comments, problems = _feedback(request, approval)
    if problems:
        return _refused(request, approval, "Changes not requested: " + "; ".join(problems) + ".")
    try:
        request_changes(approval, request.user, text, stored_comments(comments), shown=_shown(request))
    except DecisionRefused as exc:
        return _refused(request, approval, str(exc))
    remember_next(request, approval)
    messages.info(request, f"Changes requested: {approval.tool} is not performed; {approval.run.task_id} goes on with your words.")
    return redirect("runs:detail", approval.run_id)
