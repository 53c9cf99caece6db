"""The overview page: its figures over a period, scoped to the projects the viewer
operates, and every mark a link to the runs behind it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.contrib.auth.models import User
from django.test import Client

from monitoring.overview import overview, percentile, window
from projects.models import Project
from runs.models import Run
from tests.overview_scene import Scene, overview_scene

HREF = re.compile(r'<a href="([^"]+)" aria-label="([^"]+)">')


@pytest.fixture
def scene(operator: User, reviewer: User, other_project: Project) -> Scene:
    return overview_scene(operator, reviewer, other_project)


def page(client: Client, user: User, period: str = "7d") -> str:
    client.force_login(user)
    response = client.get(f"/overview/?period={period}")
    assert response.status_code == 200
    return response.content.decode()


def marks(html: str) -> dict[str, str]:
    """Each mark's label -> its link."""
    return {unescape(label): unescape(href) for href, label in HREF.findall(html)}


def listed(client: Client, href: str) -> set[str]:
    html = client.get(href).content.decode()
    return set(re.findall(r'href="/runs/([0-9a-f-]{36})/"', html))


def test_it_counts_the_runs_of_the_projects_the_viewer_operates(scene: Scene) -> None:
    data = overview(Run.objects.exclude(project__slug="elsewhere"), "24h")
    assert {name: sum(bars) for name, bars in data.outcomes.items()} == {"complete": 1, "tool_denied": 1, "stopped": 1}
    [(median, p95, count)] = data.waits.values()
    assert count == 1 and 1 <= median == p95 < 60
    assert data.refusals == {"search": {"denied": 1}, "publish": {"check_required": 1}}
    assert {model: round(sum(bars), 2) for model, bars in data.costs.items()} == {"gpt-test": 0.42}
    assert data.active == {}


def test_it_links_every_mark_to_the_runs_behind_it(client: Client, scene: Scene, operator: User) -> None:
    links = marks(page(client, operator, "24h"))
    complete = next(href for label, href in links.items() if label.startswith("complete,"))
    assert listed(client, complete) == {str(scene.waited.pk)}
    denied = next(href for label, href in links.items() if label.startswith("search, denied"))
    assert listed(client, denied) == {str(scene.denied.pk)}
    refused = next(href for label, href in links.items() if label.startswith("publish, check_required"))
    assert listed(client, refused) == {str(scene.refused.pk)}
    cost = next(href for label, href in links.items() if label.startswith("gpt-test,"))
    assert listed(client, cost) == {str(scene.waited.pk)}
    waits = [href for label, href in links.items() if label.startswith("default (1 waits), median")]
    assert [listed(client, href) for href in waits] == [{str(scene.waited.pk)}]
    assert "gpt-elsewhere" not in str(links) and "elsewhere" not in str(links)


def test_it_shows_another_project_only_to_its_own_operators(client: Client, scene: Scene, other_member: User) -> None:
    html = page(client, other_member)
    assert "gpt-elsewhere" in html and "gpt-test" not in html
    assert all(listed(client, href) <= {str(scene.elsewhere.pk)} for href in marks(html).values())


def test_it_refuses_people_who_operate_no_runs(client: Client, reviewer: User, outsider: User) -> None:
    for user in (reviewer, outsider):
        client.force_login(user)
        assert client.get("/overview/").status_code == 403
    client.logout()
    assert client.get("/overview/").status_code == 302


def test_it_escapes_what_it_draws(client: Client, scene: Scene, operator: User) -> None:
    from tests.overview_scene import usage

    usage(scene.refused, "<script>alert(1)</script>", 1.0)
    html = page(client, operator)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_it_aligns_its_bars_to_whole_hours_and_days() -> None:
    now = datetime(2026, 12, 3, 9, 41, tzinfo=UTC)
    hours = window("24h", now)
    assert hours.end == datetime(2026, 12, 3, 10, tzinfo=UTC) and len(hours.buckets) == 24
    days = window("30d", now)
    assert days.end == datetime(2026, 12, 4, tzinfo=UTC) and len(days.buckets) == 30 and days.step == timedelta(days=1)
    assert hours.bucket_of(now) == 23
    with pytest.raises(ValueError, match="period must be one of 24h, 7d, 30d; got '1y'"):
        window("1y")


def test_it_takes_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.5) == 10 and percentile(values, 0.95) == 19 and percentile([3.0], 0.95) == 3
