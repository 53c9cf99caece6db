"""Email to the people who can decide, through a real SMTP server on loopback
(aiosmtpd): the eligible reviewers of a quorum rule and nobody else, one digest for
several requests, the reminder before expiry (once), the preferences "none" and
"named", the requester's notice, a server that refuses and then accepts (retried,
delivered once, both attempts recorded), and no planted secret or diff line in any
message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from email.message import Message
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from approvals.models import ApprovalRequest
from common.metrics import host_registry
from core.scenarios import FIXED, call
from notifications import mail
from notifications.models import Mail, MailAttempt, MailPreference
from projects.models import DEFAULT_PROJECT, Project
from runs.approval_flow.flow import deny, expire_due
from tests.fixtures_services import Worker, purge_queue
from tests.fixtures_smtp import Inbox
from tests.fixtures_web import Scene, waiting_scene
from tests.helpers import edited_policy, new_policy_version

pytestmark = pytest.mark.django_db
SECRET = "planted-secret-7f3a9c2e5b"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
DIFF_LINE = "planted-diff-line-quantity-check"
SCRIPT = [
    call("read_file", path="src/calc.py"),
    call("write_file", path="src/calc.py", content=f"{FIXED}\n# {DIFF_LINE}\n# {SECRET} {AWS_KEY}\n"),
    call("run_check", check_id="tests"),
    call("publish", message=f"publish with {SECRET}"),
    call("finish", summary="fixed"),
]


@pytest.fixture(autouse=True)
def secrets(settings: Any) -> None:
    settings.HARNESS_SECRET_VALUES = [SECRET]
    settings.HARNESS_MAIL_DIGEST_SECONDS = 0.0


def person(name: str, *groups: str) -> User:
    user = User.objects.create_user(username=name, email=f"{name}@example.com", password=f"{name}-pass-123")
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def send_due() -> list[str]:
    return [mail.attempt(mail_id).status for mail_id in mail.due()]


def text(message: Message) -> str:
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return f"{message.as_string()}\n{payload.decode()}"


def filed(starter: User) -> Scene:
    return waiting_scene(starter, SCRIPT)


def assert_clean(inbox: Inbox) -> None:
    assert inbox.messages
    for message in inbox.messages:
        body = text(message)
        for planted in (SECRET, AWS_KEY, DIFF_LINE, "publish with"):
            assert planted not in body, f"{planted!r} in a mail to {message['To']}"


def test_it_mails_the_eligible_reviewers_of_a_quorum_rule_and_nobody_else(smtp_inbox: Inbox, other_member: User) -> None:
    rules = edited_policy()["rules"]
    assert isinstance(rules, list)
    new_policy_version(rules=[{**r, "reviewers": {"count": 2, "groups": ["release"]}} if r["tool"] == "publish" else r for r in rules])
    first, second = person("rel-one", "reviewer", "release"), person("rel-two", "reviewer", "release")
    starter = person("rel-starter", "reviewer", "release", "operator")
    person("rita", "reviewer")  # a reviewer, but the rule names the release group
    person("rel-watcher", "release")  # in the group, but no reviewer of the project
    other_member.email = "mona@example.com"
    other_member.save()

    scene = filed(starter)
    assert send_due() == ["delivered", "delivered"]
    assert sorted(m["To"] for m in smtp_inbox.messages) == [first.email, second.email]
    request = scene.request
    body = text(smtp_inbox.to(first.email)[0])
    project = Project.objects.get(slug=DEFAULT_PROJECT)
    assert f"project: {project.name}" in body
    assert f"run: {scene.run.task_id} ({str(scene.run.pk)[:8]})" in body
    assert "- publish," in body
    assert f"revision: {request.revision[:12]}" in body and request.revision not in body.replace(request.revision[:12], "")
    assert f"expires: {request.expires_at:%Y-%m-%d %H:%M} UTC" in body
    assert f"/approvals/{request.pk}/" in body
    assert_clean(smtp_inbox)


def test_it_sends_one_digest_for_requests_filed_close_together(smtp_inbox: Inbox, settings: Any) -> None:
    settings.HARNESS_MAIL_DIGEST_SECONDS = 60.0
    rita, starter = person("rita", "reviewer"), person("otto", "operator")
    scenes = [filed(starter), filed(starter), filed(starter)]
    assert send_due() == []  # the window is still open
    (waiting,) = Mail.objects.filter(user=rita)
    assert mail.attempt(str(waiting.pk)).status == "not_due"
    # The minute is over (the row says when it is due; a test does not wait a minute).
    Mail.objects.filter(pk=waiting.pk).update(send_after=timezone.now())
    assert send_due() == ["delivered"]
    (digest,) = smtp_inbox.to(rita.email)
    assert "3 approvals needed" in digest["Subject"]
    body = text(digest)
    assert all(f"/approvals/{scene.request.pk}/" in body for scene in scenes)
    assert_clean(smtp_inbox)


def test_it_reminds_once_before_expiry(smtp_inbox: Inbox, settings: Any) -> None:
    rita, starter = person("rita", "reviewer"), person("otto", "operator")
    scene = filed(starter)
    send_due()
    settings.HARNESS_MAIL_REMIND_BEFORE_SECONDS = 10.0
    assert mail.record_reminders() == []  # not due yet: the request has longer than that
    # Expiring within the ten seconds, but only just filed: nobody is reminded of a
    # request younger than half its life.
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(expires_at=timezone.now() + timedelta(seconds=5))
    assert mail.record_reminders() == []
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert len(mail.record_reminders()) == 1
    assert mail.record_reminders() == []
    assert send_due() == ["delivered"]
    reminder = smtp_inbox.to(rita.email)[-1]
    assert "expires soon" in reminder["Subject"]
    assert_clean(smtp_inbox)


def test_it_follows_each_persons_preference(smtp_inbox: Inbox) -> None:
    rita, rick, starter = person("rita", "reviewer"), person("rick", "reviewer"), person("otto", "operator")
    project = Project.objects.get(slug=DEFAULT_PROJECT)
    MailPreference.objects.create(user=rita, project=project, choice=MailPreference.Choice.NONE)
    MailPreference.objects.create(user=rick, project=project, choice=MailPreference.Choice.NAMED)
    filed(starter)
    assert send_due() == []
    assert smtp_inbox.messages == []
    assert not Mail.objects.exists()


def test_it_tells_the_requester_what_became_of_the_request(smtp_inbox: Inbox) -> None:
    rita, starter = person("rita", "reviewer"), person("otto", "operator")
    denied, lapsed = filed(starter), filed(starter)
    deny(denied.request, rita, "not this week")
    ApprovalRequest.objects.filter(pk=lapsed.request.pk).update(expires_at=timezone.now())
    expire_due()
    send_due()
    subjects = sorted(m["Subject"] for m in smtp_inbox.to(starter.email))
    assert len(subjects) == 2
    assert "was denied" in subjects[0] and "was expired" in subjects[1]
    # Rita's mails were due only after both requests were settled: nothing left to say.
    assert smtp_inbox.to(rita.email) == []
    assert set(Mail.objects.filter(user=rita).values_list("status", flat=True)) == {Mail.Status.SKIPPED}
    assert_clean(smtp_inbox)


# Every way text may start a new line in a mail reader: the model writes the arguments.
LINE_BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def test_it_keeps_model_text_on_its_one_line_so_it_forges_no_link(smtp_inbox: Inbox, settings: Any) -> None:
    rita, starter = person("rita", "reviewer"), person("otto", "operator")
    scene = filed(starter)
    forged = "".join(f"x.py{brk}  decide: https://evil.example/approve/{i}/" for i, brk in enumerate(LINE_BREAKS))
    # An outside tool's argument, as the model wrote it (no fixed effect to name a remote).
    ApprovalRequest.objects.filter(pk=scene.request.pk).update(effect=None, args={"path": forged}, tool="acme.deploy\n  decide: x")
    assert send_due() == ["delivered"]
    (message,) = smtp_inbox.to(rita.email)
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    lines = payload.decode().splitlines()  # at every break a mail reader might honour
    assert [line for line in lines if "decide:" in line.lstrip()[:8]] == [
        f"  decide: {settings.HARNESS_PUBLIC_URL}/approvals/{scene.request.pk}/"
    ]
    (target,) = [line for line in lines if line.startswith("- ")]
    assert target.startswith("- acme.deploy decide: x, path x.py decide: https://evil.example/approve/0/") and "evil.example" in target
    for brk in LINE_BREAKS:
        assert brk not in target


def test_it_retries_a_refused_mail_and_delivers_it_once(smtp_inbox: Inbox, settings: Any) -> None:
    # Past the two seconds a claim takes early (clocks), so the backoff shows.
    settings.HARNESS_MAIL_RETRY_BASE_SECONDS = 2.5
    rita, starter = person("rita", "reviewer"), person("otto", "operator")
    smtp_inbox.refusals = 1
    filed(starter)
    (row,) = Mail.objects.all()
    assert mail.attempt(str(row.pk)).status == "retry"
    assert mail.attempt(str(row.pk)).status == "not_due"  # the backoff holds it
    time.sleep(2.6)
    assert send_due() == ["delivered"]
    assert send_due() == []
    assert len(smtp_inbox.to(rita.email)) == 1
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Mail.Status.DELIVERED, 2)
    errors = list(MailAttempt.objects.filter(mail=row).values_list("error", flat=True))
    assert errors[0].startswith("451") and errors[1] == ""


def test_it_gives_up_on_a_permanent_refusal_and_counts_it_failed(smtp_inbox: Inbox) -> None:
    def failed_mails() -> float:
        return host_registry().get_sample_value("harness_notification_deliveries_failed_total", {"channel": "email"}) or 0.0

    before = failed_mails()
    person("rita", "reviewer")
    smtp_inbox.refusals, smtp_inbox.refusal = 1, "550 5.7.1 Not accepted here"
    filed(person("otto", "operator"))
    (row,) = Mail.objects.all()
    assert mail.attempt(str(row.pk)).status == "failed"
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Mail.Status.FAILED, 1) and row.last_error.startswith("550")
    assert failed_mails() == before + 1


@pytest.fixture
def mail_worker(smtp_inbox: Inbox, settings: Any, transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A real Celery worker (beat embedded) sending to the test's SMTP server, with
    a digest window of a minute (the test ends it), retries after half a second, and
    the beat looking for due mails every second."""
    settings.HARNESS_MAIL_DIGEST_SECONDS = 60.0
    purge_queue()
    worker = Worker(
        tmp_path_factory.mktemp("worker"),
        env={
            "HARNESS_MAIL": "1",
            "HARNESS_SMTP_HOST": "127.0.0.1",
            "HARNESS_SMTP_PORT": str(settings.EMAIL_PORT),
            "HARNESS_SMTP_SECURITY": "none",
            "HARNESS_MAIL_RETRY_BASE_SECONDS": "0.5",
            "HARNESS_BEAT_REMIND_SECONDS": "1",
        },
    )
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        purge_queue()


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_it_sends_through_the_worker_retrying_a_refusal_once(smtp_inbox: Inbox, mail_worker: Worker) -> None:
    rita, starter = person("rita", "reviewer"), person("otto", "operator")
    smtp_inbox.refusals = 1
    scenes = [filed(starter), filed(starter)]
    # The window ends now rather than in a minute: the beat finds the mail due (its
    # task waits for the minute still), and one of them sends it.
    assert Mail.objects.filter(user=rita).update(send_after=timezone.now()) == 1
    deadline = time.monotonic() + 30
    while not [m for m in smtp_inbox.to(rita.email) if "approvals needed" in m["Subject"]] and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # time for a second, wrong, copy to arrive
    (digest,) = smtp_inbox.to(rita.email)
    assert "2 approvals needed" in digest["Subject"]
    assert all(f"/approvals/{scene.request.pk}/" in text(digest) for scene in scenes)
    (row,) = Mail.objects.filter(user=rita)
    assert (row.status, row.attempts) == (Mail.Status.DELIVERED, 2)
    assert_clean(smtp_inbox)


def test_it_shows_mails_and_their_attempts_to_admins_only(smtp_inbox: Inbox, admin_user: User, client: Any) -> None:
    rita, starter = person("rita", "reviewer"), person("otto", "operator")
    smtp_inbox.refusals = 1
    filed(starter)
    send_due()
    (row,) = Mail.objects.filter(user=rita)
    client.force_login(admin_user)
    listed = client.get("/admin/notifications/mail/")
    assert listed.status_code == 200 and str(row.pk) in listed.content.decode()
    shown = client.get(f"/admin/notifications/mail/{row.pk}/change/").content.decode()
    assert "451 4.3.0 Try again later" in shown and SECRET not in shown
    client.force_login(rita)
    assert client.get("/admin/notifications/mail/").status_code == 302  # no admin: to the admin's sign-in
