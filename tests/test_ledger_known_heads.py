"""On SQLite the ledger's writer chains a single decision on from the heads this process
last left (ledger.writer, ``_write_on_known_heads``): one plain INSERT that checks, as it
inserts, that the entry links on to the heads as they are. Where they moved without it
(a rolled-back transaction of its own, entries written by another path) the entry is
not inserted and is chained in SQL instead: the chains stay whole and verifiable."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from ledger.export import verify_stored
from ledger.models import Entry, Head
from ledger.writer import Decision, Shown, record, system
from projects.models import Project, default_project_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_ledger")]


class Refused(Exception):
    pass


def decision(n: int, project: int | None) -> Decision:
    return Decision(
        kind="admin.test_change", actor=system("a test"), decided={"n": n}, shown=Shown.of({"n": n}, keep=False), project_id=project
    )


def statements(n: int, project: int | None) -> list[str]:
    """The ledger's statements recording decision ``n``, in a transaction of its own."""
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        record(decision(n, project))
    return [q["sql"] for q in captured.captured_queries if "ledger_" in q["sql"]]


def test_it_chains_a_single_decision_on_the_heads_it_left_in_one_statement() -> None:
    project = default_project_id()
    first = statements(1, project)
    # The chain's first entry: chained in SQL, the heads made, chained again.
    assert len(first) == (4 if connection.vendor == "sqlite" else 5), first
    second = statements(2, project)
    assert len(second) == 1, second
    if connection.vendor == "sqlite":
        # A plain INSERT of the entry, numbered and digested here, no recursion.
        assert "RECURSIVE" not in second[0] and "ledger_sha256" not in second[0], second
    assert verify_stored() is None
    assert list(Entry.objects.values_list("seq", "project_seq")) == [(1, 1), (2, 2)]


def test_it_chains_on_after_its_own_transaction_rolled_back() -> None:
    project = default_project_id()
    statements(1, project)
    with pytest.raises(Refused), transaction.atomic():
        record(decision(2, project))
        raise Refused
    # The heads this process last left were the rolled-back entry's: the entry is not
    # inserted on them, and is chained in SQL on the heads as they are.
    again = statements(3, project)
    assert len(again) == (2 if connection.vendor == "sqlite" else 1), again
    assert len(statements(4, project)) == 1
    assert verify_stored() is None
    assert [e.decided for e in Entry.objects.order_by("seq")] == ['{"n":1}', '{"n":3}', '{"n":4}']


def test_it_chains_on_after_entries_written_without_it() -> None:
    project = default_project_id()
    other = Project.objects.create(slug="known-heads-other", name="Other")
    statements(1, project)
    # Decisions of two projects at once are chained apart (``_write_in_steps``), moving
    # the global head past what the single-decision writer remembers, as another
    # process's entries would.
    with transaction.atomic():
        record(decision(2, project), decision(3, other.pk))
    assert statements(4, project)
    assert statements(5, None)
    assert statements(6, other.pk)
    assert verify_stored() is None
    assert list(Entry.objects.order_by("seq").values_list("seq", "project_id", "project_seq")) == [
        (1, project, 1),
        (2, project, 2),
        (3, other.pk, 1),
        (4, project, 3),
        (5, None, None),
        (6, other.pk, 2),
    ]
    assert dict(Head.objects.values_list("chain", "seq")) == {"global": 6, f"project:{project}": 3, f"project:{other.pk}": 2}
