"""Making, running, stopping and reading trials. Each repetition is an ordinary run,
created through runs' own functions (runs.runtime.create_run: the switches, the
project's permission and sources, the policy in force) and driven by the ordinary
workers; nothing in core or runs knows it is in a trial. A trial's reviewer decides
through the real approval functions (runs.approval_flow.flow) as a user of its own
that says it is the trial's rule (docs/design.md, Trials)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from django.utils.text import slugify

from approvals.checks import DecisionRefused
from approvals.models import ApprovalRequest, PolicyVersion
from approvals.policies import current_policy_row
from core import events as ev
from core.errors import FieldProblem, InputError
from core.policy import check_policy
from projects.access import check_start_project, forget
from projects.models import Membership, Project, Role
from runs.approval_flow.flow import deny, grant, request_changes, save_policy_version
from runs.control import do_kill
from runs.models import Event, Run
from runs.proposers import check_proposer_config
from runs.runtime import create_run
from trials import comparison, spec
from trials.models import Repetition, Trial, Variant

log = logging.getLogger(__name__)

ENDED = (Run.Status.COMPLETE, Run.Status.STOPPED)
RULE_USER_PREFIX = "trial-"


def create_trial(
    *,
    task: object,
    variants: object,
    k: object,
    actor: Any,
    project: str | None = None,
    name: str = "",
    seed: int = 0,
    suite: str = "",
    enqueue: bool = True,
) -> Trial:
    """Check everything, then make the trial, its variants and k runs of each (all at
    once; the project's queue admits them as its slots allow)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= spec.MAX_K:
        raise InputError("trial", [FieldProblem("k", f"must be a whole number from 1 to {spec.MAX_K}")])
    checked_task = spec.check_task(task)
    checked = spec.check_variants(variants, _proposer_problems)
    place = check_start_project(actor, project)
    reference = current_policy_row(place.pk)
    reference_document = {**reference.document, "version": reference.version}
    problems: list[FieldProblem] = []
    resolved = []
    for index, variant in enumerate(checked):
        contract, own = spec.resolve(variant, checked_task["contract"], reference.document)
        if own is not None:
            try:
                check_policy({**own, "version": 1})
            except InputError as exc:
                problems += [FieldProblem(f"variants[{index}].policy.{p.field}", p.message) for p in exc.problems]
        resolved.append((variant, contract, own))
    if problems:
        raise InputError("trial", problems)
    with transaction.atomic():
        trial = Trial.objects.create(
            project=place,
            name=(name or checked_task["name"])[:120],
            task=checked_task,
            k=k,
            seed=seed,
            reference_policy=reference_document,
            suite=suite,
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        trial.created_by = actor if getattr(actor, "pk", None) else None
        for position, (variant, contract, own) in enumerate(resolved):
            where = _variant_project(trial, place, variant["name"], own)
            row = Variant.objects.create(
                trial=trial,
                name=variant["name"],
                position=position,
                spec=variant,
                contract=contract,
                policy=own,
                reviewer=variant.get("reviewer", {"kind": "people"}),
                project=where,
            )
            if row.reviewer["kind"] != "people":
                _rule_user(row)
            for index in range(k):
                seed_of = spec.repetition_seed(seed, row.name, index)
                try:
                    run = create_run(contract, spec.proposer_for(variant, seed_of), actor, project=where.slug, enqueue=enqueue)
                except InputError as exc:
                    raise InputError("trial", [FieldProblem(f"variants[{position}].{p.field}", p.message) for p in exc.problems]) from None
                Repetition.objects.create(variant=row, index=index, seed=seed_of, run=run)
    return trial


CONNECTED = "mcp-client"


def _proposer_problems(variant: Mapping[str, Any], where: str) -> list[FieldProblem]:
    """The variant's proposer as its runs will have it, read by the runs' own reader
    (runs.proposers.check_proposer_config: the same words as for a run started on its
    own), each problem named by its path in the trial (``variants[1].proposer.preset``)."""
    proposer = variant["proposer"]
    if proposer.get("kind") == "agent" and proposer.get("preset") == CONNECTED:
        # Its agent is one a person connects with the run's token, handed once per run:
        # no one would connect k of them, and each run would wait until its deadline.
        said = f"{CONNECTED!r} is connected by a person to one run; a trial's agent is one Harness starts"
        return [FieldProblem(f"{where}.proposer.preset", said)]
    try:
        check_proposer_config(spec.proposer_for(variant, 0))
    except InputError as exc:
        return [FieldProblem(f"{where}.{_asked_in(variant, p.field)}", p.message) for p in exc.problems]
    return []


def _asked_in(variant: Mapping[str, Any], field: str) -> str:
    """Where the variant asked for a field of its runs' proposer: ``model.x`` when its
    ``model`` settings (merged into the proposer: spec.proposer_for) set it."""
    name = field.removeprefix("proposer.")
    return f"model.{name}" if name in (variant.get("model") or {}) else field


def _variant_project(trial: Trial, place: Project, name: str, policy: dict[str, Any] | None) -> Project:
    """The trial's project, or for a variant with a policy of its own a project made
    for it: the trial project's sources, limits and members, and that policy as its
    version 1. (A project's policy is the one its runs' gates read before every
    proposal, so two policies cannot run side by side in one project.)"""
    if policy is None:
        return place
    slug = slugify(f"{place.slug}-t{trial.pk}-{name}")[:60].strip("-")
    made = Project.objects.create(
        slug=slug,
        name=f"{place.name}: trial {trial.pk}, {name}"[:120],
        workspace_sources=place.workspace_sources,
        git_remotes=place.git_remotes,
        max_active_runs=place.max_active_runs,
        run_limits=place.run_limits,
        daily_max_tokens=place.daily_max_tokens,
        monthly_max_tokens=place.monthly_max_tokens,
        daily_max_cost_usd=place.daily_max_cost_usd,
        monthly_max_cost_usd=place.monthly_max_cost_usd,
    )
    for membership in Membership.objects.filter(project=place):
        Membership.objects.create(project=made, user=membership.user, group=membership.group, role=membership.role)
    PolicyVersion.objects.create(project=made, version=1, document={**policy, "version": 1}, note=f"trial {trial.pk}, variant {name}")
    if trial.created_by is not None:
        forget(trial.created_by)  # what they hold was read before this project existed
    return made


def rule_username(variant: Variant) -> str:
    return f"{RULE_USER_PREFIX}{variant.trial_id}-{slugify(variant.name)}"[:150] + ".rule"


def _rule_user(variant: Variant) -> User:
    """The trial's rule as a reviewer of the variant's project: it cannot sign in, and
    every decision it makes names it (approval_decided's ``by``)."""
    user, made = User.objects.get_or_create(
        username=rule_username(variant),
        defaults={"first_name": f"trial {variant.trial_id}", "last_name": f"{variant.name}'s {describe_reviewer(variant.reviewer)}"},
    )
    if made:
        user.set_unusable_password()
        user.save(update_fields=["password"])
        Membership.objects.create(project=variant.project, user=user, role=Role.REVIEWER)
    return user


def describe_reviewer(reviewer: dict[str, Any]) -> str:
    if reviewer.get("kind") == "rule":
        return f"rule: {reviewer.get('decision')} all"
    if reviewer.get("kind") == "script":
        return "scripted reviewer: " + ", ".join(str(d) for d in reviewer.get("decisions", []))
    return "people (the inbox)"


def repetition_of(run_id: Any) -> Repetition | None:
    return Repetition.objects.select_related("variant__trial", "variant__project").filter(run_id=run_id).first()


def review(request_id: str) -> str:
    """Decide one request of a trial's run as its variant's reviewer says: "decided",
    "later" (the run is not waiting on it yet: ask again), or why nothing was done."""
    request = ApprovalRequest.objects.select_related("run").filter(pk=request_id).first()
    if request is None:
        return "gone"
    repetition = repetition_of(request.run_id)
    if repetition is None:
        return "not a trial's"
    variant = repetition.variant
    if variant.reviewer.get("kind") == "people":
        return "people decide"
    if request.status != ApprovalRequest.Status.PENDING:
        return f"already {request.status}"
    run = request.run
    if run.status != Run.Status.WAITING or str((run.state or {}).get("revision", "")) != request.revision:
        return "later"
    if variant.trial.status == Trial.Status.STOPPED:
        return "trial stopped"
    user = _rule_user(variant)
    action, _, words = _next_decision(repetition).partition(":")
    action, words = action.strip(), words.strip()
    try:
        if action == "grant":
            grant(request, user, f"trial {variant.trial_id}'s {describe_reviewer(variant.reviewer)}")
        elif action == "deny":
            deny(request, user, words or f"denied by trial {variant.trial_id}'s {describe_reviewer(variant.reviewer)}")
        elif action == "changes":
            request_changes(request, user, words or "please change this")
        elif action == "renew_policy":
            # The project's policy saved again, as an admin would: the request goes
            # stale and the call goes back through the gates (a stale approval).
            current = current_policy_row(variant.project_id)
            save_policy_version(
                PolicyVersion(project_id=variant.project_id, note=f"trial {variant.trial_id}: renewed"), dict(current.document)
            )
    except DecisionRefused as exc:
        return f"refused: {exc}"
    return "decided"


def _next_decision(repetition: Repetition) -> str:
    reviewer = repetition.variant.reviewer
    if reviewer.get("kind") == "rule":
        return str(reviewer["decision"])
    decisions = list(reviewer.get("decisions", ["grant"]))
    Repetition.objects.filter(pk=repetition.pk).update(decisions_used=F("decisions_used") + 1)
    position = min(repetition.decisions_used, len(decisions) - 1)
    return str(decisions[position])


def review_waiting(trial: Trial) -> int:
    """Decide every request of the trial's runs still waiting on its rules (what the
    event listener's task does for each; this catches one it missed)."""
    decided = 0
    pending = ApprovalRequest.objects.filter(run__trial_repetition__variant__trial=trial, status=ApprovalRequest.Status.PENDING).exclude(
        run__trial_repetition__variant__reviewer__kind="people"
    )
    for request_id in pending.values_list("pk", flat=True):
        decided += review(str(request_id)) == "decided"
    return decided


def runs_of(trial: Trial) -> QuerySet[Run]:
    return Run.objects.filter(trial_repetition__variant__trial=trial)


def tend(trial: Trial) -> Trial:
    """The trial's status from its runs: done once every run has ended."""
    if trial.status == Trial.Status.RUNNING and not runs_of(trial).exclude(status__in=ENDED).exists():
        Trial.objects.filter(pk=trial.pk, status=Trial.Status.RUNNING).update(status=Trial.Status.DONE, ended_at=timezone.now())
        trial.refresh_from_db()
    return trial


def stop_trial(trial: Trial, by: str, reason: str = "") -> int:
    """Stop the trial: each of its runs still going is killed as an operator's kill
    would (runs.control.do_kill). Returns how many were."""
    said = f"trial {trial.pk} stopped" + (f": {reason}" if reason else "")
    with transaction.atomic():
        updated = Trial.objects.filter(pk=trial.pk, status=Trial.Status.RUNNING).update(
            status=Trial.Status.STOPPED, stop_message=said, ended_at=timezone.now()
        )
    killed = 0
    for run in runs_of(trial).exclude(status__in=ENDED):
        killed += do_kill(run, by, reason=said)
    trial.refresh_from_db()
    return killed if updated or killed else 0


def progress(trial: Trial) -> dict[str, Any]:
    """How far each variant is: runs ended of k, and each run's status."""
    variants = []
    for variant in trial.variants.all():
        reps = list(variant.repetitions.select_related("run"))
        ended = sum(1 for r in reps if r.run is not None and r.run.status in ENDED)
        waiting = sum(1 for r in reps if r.run is not None and r.run.status == Run.Status.WAITING)
        variants.append({"variant": variant.name, "runs": len(reps), "ended": ended, "waiting": waiting})
    return {
        "status": trial.status,
        "variants": variants,
        "ended": sum(v["ended"] for v in variants),
        "runs": sum(v["runs"] for v in variants),
    }


def events_of(run_id: Any) -> list[ev.AnyEvent]:
    """A run's log, typed, in order."""
    return [row.typed() for row in Event.objects.filter(run_id=run_id).order_by("seq")]


def figures(trial: Trial) -> dict[str, Any]:
    """The comparison (trials.comparison) of the trial, from its runs' events."""
    per_variant = []
    for variant in trial.variants.all():
        runs = [
            comparison.run_figures(str(rep.run_id), rep.index, events_of(rep.run_id), trial.task, trial.reference_policy)
            for rep in variant.repetitions.all()
            if rep.run_id is not None
        ]
        per_variant.append((variant.name, runs))
    meta = {v.name: v for v in trial.variants.all()}
    presets = {name: str(v.spec["proposer"].get("preset", "")) for name, v in meta.items() if v.spec["proposer"].get("kind") == "agent"}
    result = comparison.compare(per_variant, trial.k, presets)
    for summary in result["variants"]:
        variant = meta[summary["variant"]]
        summary["change"] = {key: value for key, value in variant.spec.items() if key not in ("name",)}
        summary["reviewer"] = describe_reviewer(variant.reviewer)
        summary["project"] = variant.project.slug
    return {
        "trial": {
            "id": trial.pk,
            "name": trial.name,
            "task": trial.task["name"],
            "k": trial.k,
            "seed": trial.seed,
            "status": trial.status,
            "project": trial.project.slug,
            "reference_policy_version": trial.reference_policy.get("version"),
            "suite": trial.suite,
        },
        **result,
    }
