"""A project's queue with real Celery workers (issue 29): a cap of 2 and five runs
created, with four worker processes free to take them: never more than two active,
started first in first out, every queued run visible as queued with its place while
it waits, and all complete."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from projects.models import Project
from runs.models import Event, Run
from runs.persistence.store import load_state
from runs.runtime import create_run
from tests.fixtures_services import Worker, purge_queue
from tests.test_api import FIXED_TOTAL, SMALL_CONTRACT

pytestmark = [pytest.mark.celery, pytest.mark.docker]

FIX_AND_FINISH = {
    "kind": "scripted",
    "script": [
        {"tool": "write_file", "args": {"path": "orders/total.py", "content": FIXED_TOTAL}},
        {"tool": "run_check", "args": {"check_id": "tests"}},
        {"tool": "finish", "args": {"summary": "negative quantities are rejected"}},
    ],
}


@pytest.fixture
def four_workers(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """One worker process with four children: more than the cap, so the cap is the queue's."""
    purge_queue()
    worker = Worker(tmp_path_factory.mktemp("worker"), concurrency=4)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        purge_queue()


def places_shown(client: Client) -> dict[str, int]:
    """Run id prefix -> the queue position the runs list shows for it."""
    page = client.get(reverse("runs:list")).content.decode()
    shown: dict[str, int] = {}
    for row in page.split("<tr>")[1:]:
        if 'data-queued="' in row:
            position = int(row.split('data-queued="', 1)[1].split('"', 1)[0])
            prefix = row.split('<div class="mono faint">', 1)[1][:8]
            shown[prefix] = position
    return shown


def test_it_runs_at_most_the_cap_at_once_first_in_first_out_and_completes_every_run(
    four_workers: Worker, other_project: Project, other_member: User
) -> None:
    other_project.max_active_runs = 2
    other_project.save()
    client = Client()
    client.force_login(other_member)
    runs = [create_run({**SMALL_CONTRACT, "task_id": f"queued-{i}"}, FIX_AND_FINISH, other_member) for i in range(5)]
    ids = [str(run.pk)[:8] for run in runs]
    assert places_shown(client) == {ids[2]: 1, ids[3]: 2, ids[4]: 3}
    seen: dict[str, list[int]] = {prefix: [] for prefix in ids}
    most_active = 0
    deadline = time.monotonic() + 240
    while Run.objects.filter(pk__in=[r.pk for r in runs], status__in=("running", "waiting_approval")).exists():
        assert time.monotonic() < deadline, four_workers.log()[-4000:]
        for prefix, position in places_shown(client).items():
            seen[prefix].append(position)
        most_active = max(most_active, Run.objects.filter(project=other_project, holds_slot=True).count())
        time.sleep(0.1)
    for run in runs:
        run.refresh_from_db()
        assert run.outcome == "complete", (run.task_id, run.outcome, run.stop_message)
    # Each waiting run was seen queued, its place only moving forward.
    for prefix in ids[2:]:
        assert seen[prefix] and seen[prefix] == sorted(seen[prefix], reverse=True), (prefix, seen[prefix])
    assert not seen[ids[0]] and not seen[ids[1]]
    # What the runs' own logs say, independently of the slots: from each run's first
    # event to its last, never more than two at once, and they started in order.
    spans: list[tuple[datetime, datetime]] = []
    for run in runs:
        times = list(Event.objects.filter(run=run).order_by("seq").values_list("ts", flat=True))
        spans.append((times[0], times[-1]))
    moments = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda m: (m[0], m[1]))
    active = overlap = 0
    for _, step in moments:
        active += step
        overlap = max(overlap, active)
    assert overlap <= 2 and most_active <= 2, (overlap, most_active)
    # First in first out: the queued runs were admitted in the order they were created
    # (an admitted run's clock starts at its admission), each after the first two began.
    admitted = [load_state(run).started_at for run in runs[2:]]
    assert admitted == sorted(admitted), "first in first out"
    assert min(start for start, _ in spans[2:]) >= max(start for start, _ in spans[:2])
    other_project.refresh_from_db()
    assert other_project.active_runs == 0
    print(f"\nqueue: 5 runs, cap 2, most active at once {overlap}; spans {[round((e - s).total_seconds(), 1) for s, e in spans]}")
