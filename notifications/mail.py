"""Email to the people who can decide an approval request, and to whoever asked.

- **Filed**: each eligible reviewer of the run's project (a reviewer there, narrowed
  to the rule's named users and groups, never the run's starter, with an address and a
  preference that wants it) gets a mail. A mail waits ``HARNESS_MAIL_DIGEST_SECONDS``
  before it leaves; requests for the same person filed meanwhile join it: one digest
  instead of a flood.
- **Reminder**: the beat mails the eligible reviewers of a request that expires
  within ``HARNESS_MAIL_REMIND_BEFORE_SECONDS`` and has lived half its life, once per
  request and person.
- **Outcome**: the requester (the run's starter) is told when the request is decided,
  expires or is cancelled.

A mail says the project, the run, the tool and its target, the short revision, the
expiry and the link to the approval page (which needs sign-in): never the arguments,
the diff or an effect's body, and its text is masked like every stored value."""

from __future__ import annotations

import logging
import re
import smtplib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals.models import ApprovalRequest
from common import permissions
from common.metrics import DELIVERIES_FAILED
from common.redact import redact_text, secret_values
from core.visible import visible_text
from notifications import messages
from notifications.models import Mail, MailAttempt, MailPreference
from projects.models import Membership
from projects.roles import PROJECT_ROLES

log = logging.getLogger(__name__)
ERROR_CHARS = 1000
TARGET_CHARS = 200
REVISION_CHARS = 12
# Where a tool's target is, in the order looked for: the fixed effect's, then the arguments'.
TARGET_KEYS = ("remote", "branch", "project", "url", "path", "check_id")
CREDENTIALS_IN_URL = re.compile(r"(?<=://)[^/@\s]+@")
DECIDING_ROLES = [role for role, names in PROJECT_ROLES.items() if permissions.DECIDE_APPROVALS in names]


@dataclass(frozen=True)
class Outcome:
    status: str  # delivered | failed | retry | skipped | not_due
    retry_in: float | None = None


def reviewers_of(project_id: int) -> QuerySet[User]:
    """The project's active reviewers, in person or through a group: who may be mailed
    about its requests (with an address)."""
    memberships = Membership.objects.filter(project_id=project_id, role__in=DECIDING_ROLES)
    return User.objects.filter(Q(pk__in=memberships.values("user_id")) | Q(groups__in=memberships.values("group_id")), is_active=True)


def eligible_reviewers(request: ApprovalRequest) -> list[User]:
    """Who may decide ``request``: its project's reviewers, narrowed to the rule's named
    users and groups, never the run's starter; only those with an address."""
    run = request.run
    people = reviewers_of(run.project.pk).exclude(email="")
    if run.created_by_id is not None:
        people = people.exclude(pk=run.created_by_id)
    if request.eligible_users or request.eligible_groups:
        people = people.filter(Q(username__in=request.eligible_users) | Q(groups__name__in=request.eligible_groups))
    return list(people.distinct().order_by("pk"))


def _named(request: ApprovalRequest, user: User) -> bool:
    return user.username in request.eligible_users or user.groups.filter(name__in=request.eligible_groups).exists()


def wants(user: User, request: ApprovalRequest) -> bool:
    choice = MailPreference.objects.filter(user=user, project=request.run.project).values_list("choice", flat=True).first()
    if choice == MailPreference.Choice.NONE:
        return False
    if choice == MailPreference.Choice.NAMED:
        return _named(request, user)
    return True


def record_requested(request: ApprovalRequest) -> list[str]:
    """A mail (or a place in a waiting one) for each eligible reviewer who wants it;
    the ids of the new mails (a joined one is sent already when its time comes)."""
    if not settings.HARNESS_MAIL_ENABLED:
        return []
    now = timezone.now()
    new = []
    for user in eligible_reviewers(request):
        if not wants(user, request):
            continue
        # Locked: two requests filed at once for one person join one mail, not two.
        waiting = (
            Mail.objects.select_for_update()
            .filter(user=user, kind=Mail.Kind.REQUESTED, status=Mail.Status.PENDING, attempts=0, send_after__gt=now)
            .first()
        )
        if waiting is not None:
            waiting.request_ids = [*waiting.request_ids, str(request.pk)]
            waiting.save(update_fields=["request_ids"])
            continue
        mail = Mail.objects.create(
            user=user,
            project_id=request.run.project_id,
            kind=Mail.Kind.REQUESTED,
            request_ids=[str(request.pk)],
            send_after=now + timedelta(seconds=settings.HARNESS_MAIL_DIGEST_SECONDS),
        )
        new.append(str(mail.pk))
    return new


def record_outcome(request: ApprovalRequest, outcome: str) -> list[str]:
    """The requester's notice that ``request`` was decided (granted, denied, changes
    requested), expired or cancelled."""
    starter = request.run.created_by
    if not settings.HARNESS_MAIL_ENABLED or starter is None or not starter.email or not starter.is_active:
        return []
    mail = Mail.objects.create(
        user=starter,
        project_id=request.run.project_id,
        kind=Mail.Kind.OUTCOME,
        request_ids=[str(request.pk)],
        outcome=outcome,
        send_after=timezone.now(),
    )
    return [str(mail.pk)]


def record_reminders() -> list[str]:
    """A reminder for each eligible reviewer of each pending request that expires
    soon, unless one was recorded already (the beat runs this again and again)."""
    if not settings.HARNESS_MAIL_ENABLED:
        return []
    now = timezone.now()
    soon = ApprovalRequest.objects.filter(
        status=ApprovalRequest.Status.PENDING,
        expires_at__gt=now,
        expires_at__lte=now + timedelta(seconds=settings.HARNESS_MAIL_REMIND_BEFORE_SECONDS),
    ).select_related("run")
    new = []
    for request in soon:
        # A request filed with less life than the window is reminded of at half its life,
        # not at once: its first mail has only just gone.
        if now - request.created_at < (request.expires_at - request.created_at) / 2:
            continue
        reminded = _reminded(request)
        for user in eligible_reviewers(request):
            if user.pk in reminded or not wants(user, request):
                continue
            mail = Mail.objects.create(
                user=user, project_id=request.run.project_id, kind=Mail.Kind.REMINDER, request_ids=[str(request.pk)], send_after=now
            )
            new.append(str(mail.pk))
    return new


def _reminded(request: ApprovalRequest) -> set[int]:
    """Who has a reminder of ``request`` already. Read in Python: JSON containment is
    not portable across SQLite and PostgreSQL, and reminders are few."""
    rows = Mail.objects.filter(kind=Mail.Kind.REMINDER, project=request.run.project).values_list("user_id", "request_ids")
    return {user_id for user_id, ids in rows if str(request.pk) in ids}


def one_line(text: str) -> str:
    """``text`` with every run of whitespace one space: a line break of any kind (``\\r``,
    U+0085, U+2028, the file separators...) in text a model or a tool wrote would start
    a line of its own in the mail, e.g. a forged "decide:" link above the real one;
    and every other hidden character a mark naming it (core.visible)."""
    return visible_text(" ".join(text.split()))


def target_of(request: ApprovalRequest) -> str:
    """What the call acts on, in one short line: the effect's remote or project, else
    the argument naming a path or check. Credentials in a URL are cut out."""
    for source in (request.effect or {}, request.args or {}):
        for key in TARGET_KEYS:
            value = source.get(key) if isinstance(source, dict) else None
            if isinstance(value, str) and value:
                return f"{key} {one_line(CREDENTIALS_IN_URL.sub('', value))[:TARGET_CHARS]}"
    return "(no target)"


def _described(request: ApprovalRequest) -> str:
    run = request.run
    return "\n".join(
        [
            f"- {one_line(request.tool)}, {target_of(request)}",
            f"  project: {one_line(run.project.name)} ({run.project.slug})",
            f"  run: {one_line(run.task_id)} ({str(run.pk)[:8]})",
            f"  revision: {request.revision[:REVISION_CHARS]}",
            f"  expires: {request.expires_at:%Y-%m-%d %H:%M} UTC",
            f"  decide: {settings.HARNESS_PUBLIC_URL}/approvals/{request.pk}/",
        ]
    )


def footer() -> str:
    return (
        "\n\nThe link needs you to sign in; this mail itself approves nothing.\n"
        f"Choose which requests you are mailed about: {settings.HARNESS_PUBLIC_URL}/mail/"
    )


def render(mail: Mail) -> tuple[str, str] | None:
    """(subject, body) from the requests as they are now; None when nothing is left
    to say (every request of a reviewer's mail was decided before it left)."""
    requests = list(ApprovalRequest.objects.filter(pk__in=mail.request_ids).select_related("run", "run__project").order_by("created_at"))
    if mail.kind != Mail.Kind.OUTCOME:
        requests = [r for r in requests if r.status == ApprovalRequest.Status.PENDING]
    if not requests:
        return None
    first = requests[0]
    where, tool = one_line(first.run.project.name), one_line(first.tool)
    if mail.kind == Mail.Kind.OUTCOME:
        subject = f"[Harness] {where}: your request for {tool} was {mail.outcome.replace('_', ' ')}"
        body = f"The approval request below was {mail.outcome.replace('_', ' ')}.\n\n{_described(first)}"
    elif mail.kind == Mail.Kind.REMINDER:
        subject = f"[Harness] {where}: approval for {tool} expires soon"
        body = f"This request still waits for a decision and expires soon.\n\n{_described(first)}"
    elif len(requests) == 1:
        subject = f"[Harness] {where}: approval needed for {tool}"
        body = f"A run asks for your approval.\n\n{_described(first)}"
    else:
        subject = f"[Harness] {len(requests)} approvals needed"
        body = f"{len(requests)} requests wait for a decision you may make.\n\n" + "\n\n".join(_described(r) for r in requests)
    secrets = secret_values()
    return redact_text(subject, secrets), redact_text(body + footer(), secrets)


def claim(mail_id: str) -> Mail | None:
    """The mail, if it is due and this worker took it: a conditional UPDATE moves its
    time past the send, so a duplicated task message finds nothing to do."""
    now = timezone.now()
    lease_until = now + timedelta(seconds=settings.EMAIL_TIMEOUT + 30)
    claimed = Mail.objects.filter(pk=mail_id, status=Mail.Status.PENDING, send_after__lte=now + timedelta(seconds=2)).update(
        send_after=lease_until
    )
    if not claimed:
        return None
    return Mail.objects.select_related("user").get(pk=mail_id)


def attempt(mail_id: str) -> Outcome:
    """Hand a due mail to the SMTP server once and record how it went."""
    mail = claim(mail_id)
    if mail is None:
        return Outcome("not_due")
    rendered = render(mail)
    if rendered is None:
        Mail.objects.filter(pk=mail.pk).update(status=Mail.Status.SKIPPED, send_after=timezone.now())
        return Outcome("skipped")
    subject, body = rendered
    Mail.objects.filter(pk=mail.pk).update(subject=subject, body=body, to=mail.user.email)
    started = time.monotonic()
    error, final = "", False
    try:
        EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [mail.user.email]).send()
    except smtplib.SMTPResponseException as exc:
        # 5xx: the server will not take it however often we ask; 4xx: later.
        said = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        error, final = f"{exc.smtp_code} {said}", exc.smtp_code >= 500
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _text in exc.recipients.values()]
        error, final = f"recipient refused: {codes}", all(code >= 500 for code in codes)
    except (smtplib.SMTPException, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return _record(mail, error[:ERROR_CHARS], int((time.monotonic() - started) * 1000), final)


def _record(mail: Mail, error: str, duration_ms: int, final: bool) -> Outcome:
    now = timezone.now()
    number = mail.attempts + 1
    retry_in = None
    if not error:
        status, outcome = Mail.Status.DELIVERED, "delivered"
    elif not final and number < settings.HARNESS_MAIL_MAX_ATTEMPTS:
        retry_in = messages.backoff_seconds(number, settings.HARNESS_MAIL_RETRY_BASE_SECONDS, settings.HARNESS_MAIL_RETRY_MAX_SECONDS)
        status, outcome = Mail.Status.PENDING, "retry"
    else:
        status, outcome = Mail.Status.FAILED, "failed"
    # The attempt and the mail's state together: the admin never shows one without the other.
    with transaction.atomic():
        MailAttempt.objects.create(mail=mail, number=number, at=now, error=error, duration_ms=duration_ms)
        Mail.objects.filter(pk=mail.pk).update(
            status=status,
            attempts=number,
            last_error=error,
            send_after=now + timedelta(seconds=retry_in) if retry_in is not None else now,
            delivered_at=now if not error else None,
        )
    if status == Mail.Status.FAILED:
        DELIVERIES_FAILED.labels("email").inc()
    if error:
        log.warning("mail %s: attempt %d failed: %s", mail.pk, number, error)
    return Outcome(outcome, retry_in)


def due(ids: Iterable[str] | None = None) -> list[str]:
    """Pending mails whose time has come (for the sweep: a digest's time, a lost task)."""
    rows = Mail.objects.filter(status=Mail.Status.PENDING, send_after__lte=timezone.now())
    if ids is not None:
        rows = rows.filter(pk__in=list(ids))
    return [str(pk) for pk in rows.values_list("pk", flat=True)]
