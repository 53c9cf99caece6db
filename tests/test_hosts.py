"""Worker hosts (runs/scheduling/hosts.py): a heartbeat that runs out, the queue a run's wake-up
goes to, and a worker of another host passing a run on to the live host that holds
its workspace instead of driving it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from pytest_django import Settings

from runs import runtime
from runs.models import Run, WorkerHost
from runs.scheduling import hosts
from tests.helpers import World

pytestmark = pytest.mark.django_db


def test_it_takes_a_host_for_alive_until_its_heartbeat_runs_out() -> None:
    assert not hosts.alive("host-x")
    hosts.beat("host-x")
    assert hosts.alive("host-x")
    assert WorkerHost.objects.get(name="host-x").queue == hosts.host_queue("host-x")
    WorkerHost.objects.filter(name="host-x").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert not hosts.alive("host-x")
    hosts.beat("host-x")  # a host that comes back is alive again
    assert hosts.alive("host-x")


def test_it_sends_a_wake_up_to_the_runs_host_while_it_lives_else_to_the_shared_queue(settings: Settings) -> None:
    settings.HARNESS_WORKER_HOST = "host-me"
    run = World().create()
    run_id = str(run.pk)
    assert hosts.queue_for(run_id) is None and hosts.live_holder(run_id) is None  # nobody's yet
    Run.objects.filter(pk=run_id).update(host="host-x")
    assert hosts.queue_for(run_id) is None and hosts.live_holder(run_id) is None  # its host is gone
    hosts.beat("host-x")
    assert hosts.queue_for(run_id) == f"{settings.CELERY_TASK_DEFAULT_QUEUE}.host.host-x"
    assert hosts.live_holder(run_id) == "host-x"
    Run.objects.filter(pk=run_id).update(host="host-me")
    hosts.beat("host-me")
    assert hosts.live_holder(run_id) is None  # this host's own: it drives it
    assert hosts.queue_for(run_id) == f"{settings.CELERY_TASK_DEFAULT_QUEUE}.host.host-me"


def test_it_passes_a_run_on_to_the_live_host_that_holds_it_without_claiming_it(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.HARNESS_WORKER_HOST = "host-me"
    woken: list[str] = []
    monkeypatch.setattr("runs.scheduling.queue.enqueue_resume", woken.append)
    run = World().create()
    Run.objects.filter(pk=run.pk).update(host="host-x")
    hosts.beat("host-x")
    assert runtime.advance(str(run.pk)) == "held_by_host"
    assert woken == [str(run.pk)]
    run.refresh_from_db()
    assert run.lease_token == 0 and run.lease_owner == ""  # never claimed here


class Queues:
    """What the worker's setup signal sees of the queues it consumes."""

    def __init__(self, *names: str) -> None:
        self.consume_from = dict.fromkeys(names)
        self.added: list[str] = []

    def select_add(self, name: str) -> None:
        self.added.append(name)


def test_it_has_a_run_worker_consume_its_hosts_queue_and_the_notifier_not(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from harness_site import celery as site

    settings.HARNESS_WORKER_HOST = "host-me"
    monkeypatch.setattr(site, "_drives_runs", False)
    runs = Queues(settings.CELERY_TASK_DEFAULT_QUEUE)
    site.consume_host_queue("runs@x", SimpleNamespace(app=SimpleNamespace(amqp=SimpleNamespace(queues=runs))))
    assert runs.added == [hosts.host_queue("host-me")] and site._drives_runs
    monkeypatch.setattr(site, "_drives_runs", False)
    notifier = Queues("harness-notify")
    site.consume_host_queue("notify@x", SimpleNamespace(app=SimpleNamespace(amqp=SimpleNamespace(queues=notifier))))
    assert notifier.added == [] and not site._drives_runs
