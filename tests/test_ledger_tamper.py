"""The decision ledger's chain finds any change to the record (docs/design.md, Decision
ledger): an entry altered, removed, inserted or reordered, in the database
(the stored chain checked, and its export) or in an export, is found and named by
``verify``; the offline verifier runs as ``python3 -m ledger.verify`` with no Django
and no settings; a removed end is found against the published head."""

from __future__ import annotations

import http.server
import io
import json
import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from ledger import verify
from ledger.export import forget_shown_content, head, verify_stored, write_export
from ledger.models import Content, Entry, Head
from ledger.publish import publish
from ledger.writer import Decision, Shown, person, record, system
from projects.models import Project, default_project_id
from tests.helpers import run_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.usefixtures("fresh_ledger")]

ROOT = Path(__file__).resolve().parent.parent


def decisions(count: int, by: User | None = None) -> None:
    """``count`` decisions, alternating between the default project and another, and one
    of no project, each in a transaction of its own."""
    other = Project.objects.create(slug="tamper-other", name="Other")
    for n in range(count):
        project = [default_project_id(), other.pk, None][n % 3]
        record(
            Decision(
                kind="admin.test_change",
                actor=person(by) if by is not None else system("a test"),
                decided={"n": n, "text": f"change {n}"},
                shown=Shown.of({"shown": n}),
                project_id=project,
            )
        )


def exported() -> list[dict[str, Any]]:
    out = io.StringIO()
    write_export(out)
    # Lines end at "\n" alone, as a file's are read: str.splitlines would also split at
    # a U+2028 inside a value, which the export writes as it is.
    entries, problem = verify.read_lines(out.getvalue().split("\n")[:-1])
    assert problem is None
    return entries


def problem_in_export(entries: list[dict[str, Any]], head: str | None = None) -> verify.Problem:
    found = verify.verify(entries, verify.Head.parse(head) if head else None)
    assert found is not None
    return found


def test_it_verifies_an_untouched_chain_in_the_database_and_in_its_export(reviewer: User) -> None:
    decisions(9, reviewer)
    assert verify_stored() is None
    entries = exported()
    assert [e["seq"] for e in entries] == list(range(1, 10))
    assert verify.verify(entries, verify.Head.parse(f"{head()['seq']}:{head()['digest']}")) is None
    # Every entry carries the content its digest of what was shown covers.
    assert all(verify.sha256(e["content"].encode()) == e["shown"] for e in entries)
    assert entries[0]["actor"] == {"kind": "user", "name": reviewer.username, "id": str(reviewer.pk)}
    # The project chains are numbered on their own, each from 1.
    by_project: dict[Any, list[int]] = {}
    for e in entries:
        by_project.setdefault(e["project"], []).append(e["project_seq"])
    assert by_project[None] == [None, None, None]
    assert all(seqs == list(range(1, len(seqs) + 1)) for p, seqs in by_project.items() if p is not None)


# -- in the database ---------------------------------------------------------------------


def test_it_names_an_entry_altered_in_the_database() -> None:
    decisions(6)
    Entry.objects.filter(seq=4).update(decided=json.dumps({"n": 3, "text": "something else"}, separators=(",", ":"), sort_keys=True))
    problem = verify_stored()
    assert problem is not None and (problem.what, problem.seq) == ("altered", 4), problem
    assert "entry 4 was altered" in str(problem)


def test_it_names_an_entry_altered_with_its_digest_recomputed() -> None:
    decisions(6)
    entry = exported()[2]
    forged = {**entry, "decided": {"n": 2, "text": "forged"}}
    forged["digest"] = verify.entry_digest(forged)
    Entry.objects.filter(seq=3).update(decided=verify.canonical(forged["decided"]).decode(), digest=forged["digest"])
    problem = verify_stored()
    assert problem is not None and (problem.what, problem.seq) == ("altered", 3), problem


def test_it_names_an_entry_removed_from_the_database() -> None:
    decisions(6)
    Entry.objects.filter(seq=3).delete()
    problem = verify_stored()
    assert problem is not None and (problem.what, problem.seq) == ("removed", 3), problem
    assert "entry 3 of the global chain removed" in str(problem)


def test_it_names_the_last_entry_removed_from_the_database_by_the_head() -> None:
    decisions(5)
    Entry.objects.filter(seq=5).delete()
    problem = verify_stored()
    assert problem is not None and (problem.what, problem.seq) == ("truncated", 5), problem


def test_it_names_an_entry_inserted_into_the_database() -> None:
    decisions(6)
    entries = exported()
    # A forged decision between 3 and 4: linked to 3, with a valid digest of its own,
    # and the entries after it numbered on to make room.
    forged = {**entries[2], "seq": 4, "prev": entries[2]["digest"], "decided": {"n": 99, "text": "never decided"}, "project": None}
    forged.update(project_seq=None, project_prev=None)
    forged["digest"] = verify.entry_digest(forged)
    for seq in range(6, 3, -1):
        Entry.objects.filter(seq=seq).update(seq=seq + 1)
    row = Entry.objects.get(seq=3)
    row.pk, row.seq, row.prev, row.project_id, row.project_seq, row.project_prev = None, 4, forged["prev"], None, None, None
    row.decided, row.digest = verify.canonical(forged["decided"]).decode(), forged["digest"]
    row.save()
    problem = verify_stored()
    assert problem is not None and (problem.what, problem.seq) == ("inserted", 4), problem


def test_it_names_an_entry_appended_to_the_database_after_the_published_head(tmp_path: Path) -> None:
    decisions(4)
    published = publish(f"file:{tmp_path / 'heads.jsonl'}")
    decisions_after = exported()
    last = decisions_after[-1]
    # A forger who appends and moves the head row too: only the published head finds it.
    forged = {**last, "seq": 5, "prev": last["digest"], "decided": {"n": 5}, "project": None, "project_seq": None, "project_prev": None}
    forged["digest"] = verify.entry_digest(forged)
    row = Entry.objects.get(seq=4)
    row.pk, row.seq, row.prev, row.project_id, row.project_seq, row.project_prev = None, 5, last["digest"], None, None, None
    row.decided, row.digest = verify.canonical(forged["decided"]).decode(), forged["digest"]
    row.save()
    Head.objects.filter(chain="global").update(seq=5, digest=forged["digest"])
    assert verify_stored() is None
    line = json.loads((tmp_path / "heads.jsonl").read_text().splitlines()[-1])
    assert line["digest"] == published["digest"]
    problem = problem_in_export(exported(), f"{line['seq']}:{line['digest']}")
    assert (problem.what, problem.seq) == ("inserted", 5), problem


def test_it_names_entries_reordered_in_the_database() -> None:
    decisions(6)
    # Swap entries 2 and 3 by their numbers (through a number no entry has).
    Entry.objects.filter(seq=2).update(seq=-2)
    Entry.objects.filter(seq=3).update(seq=2)
    Entry.objects.filter(seq=-2).update(seq=3)
    problem = verify_stored()
    assert problem is not None and problem.what == "reordered" and problem.seq == 3, problem
    assert "entry 3 was moved to position 2" in str(problem)


def test_it_names_the_altered_content_of_what_was_shown() -> None:
    decisions(3)
    entry = Entry.objects.get(seq=2)
    Content.objects.filter(digest=entry.shown).update(body='{"shown":"something else"}')
    problem = verify_stored()
    assert problem is not None and (problem.what, problem.seq) == ("altered", 2), problem
    assert "content" in str(problem)


# -- in an export ------------------------------------------------------------------------


def test_it_names_each_change_to_an_export() -> None:
    decisions(8)
    entries = exported()

    altered = [dict(e) for e in entries]
    altered[4] = {**altered[4], "kind": "admin.something_else"}
    assert (problem_in_export(altered).what, problem_in_export(altered).seq) == ("altered", 5)

    removed = entries[:3] + entries[4:]
    assert (problem_in_export(removed).what, problem_in_export(removed).seq) == ("removed", 4)

    reordered = entries[:2] + [entries[3], entries[2]] + entries[4:]
    assert (problem_in_export(reordered).what, problem_in_export(reordered).seq) == ("reordered", 3)

    forged = {**entries[5], "decided": {"n": 77}, "prev": entries[4]["digest"]}
    forged["digest"] = verify.entry_digest(forged)
    forged["content"] = entries[5]["content"]
    inserted = entries[:5] + [forged] + entries[5:]
    found = problem_in_export(inserted)
    assert (found.what, found.seq) == ("inserted", 6), found
    assert forged["digest"][:16] in str(found)

    truncated = entries[:-2]
    last = entries[-1]
    found = problem_in_export(truncated, f"{last['seq']}:{last['digest']}")
    assert (found.what, found.seq) == ("truncated", 7), found
    found = problem_in_export(truncated, last["digest"])
    assert found.what == "truncated"


def test_it_verifies_an_export_offline_with_the_one_file_and_no_django(tmp_path: Path) -> None:
    decisions(5)
    export = tmp_path / "ledger.jsonl"
    code, _out, err = run_command("ledger", "export", "--output", str(export))
    assert code == 0 and "5 entries exported" in err
    # The verifier file alone, copied elsewhere, with an environment that names no settings.
    alone = tmp_path / "elsewhere" / "verify.py"
    alone.parent.mkdir()
    alone.write_text((ROOT / "ledger" / "verify.py").read_text())
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    ok = subprocess.run([sys.executable, "-I", str(alone), str(export)], capture_output=True, text=True, env=env, check=False)
    assert ok.returncode == 0 and ok.stdout.startswith("OK: 5 entries"), ok
    lines = export.read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    export.write_text("\n".join(lines) + "\n")
    bad = subprocess.run(
        [sys.executable, "-m", "ledger.verify", str(export)], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    assert bad.returncode == 1 and "FAILED: reordered: entry 2" in bad.stdout, bad
    # And through manage.py, which hands it to the same module.
    code, out, _err = run_command("ledger", "verify", str(export))
    assert code == 1 and "reordered" in out
    code, out, _err = run_command("ledger", "head")
    assert json.loads(out)["seq"] == 5


def test_it_publishes_the_head_to_a_log_line_a_file_or_a_webhook(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    decisions(2)
    with caplog.at_level("INFO", logger="harness.ledger"):
        published = publish("log")
    assert f"decision ledger head 2:{published['digest']}" in caplog.text
    publish(f"file:{tmp_path / 'heads'}")
    publish(f"file:{tmp_path / 'heads'}")
    assert [json.loads(line)["seq"] for line in (tmp_path / "heads").read_text().splitlines()] == [2, 2]
    received: list[dict[str, Any]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    try:
        publish(f"http://127.0.0.1:{server.server_address[1]}/heads")
    finally:
        thread.join(timeout=10)
        server.server_close()
    assert received and received[0]["digest"] == published["digest"]
    with pytest.raises(ValueError, match="HARNESS_LEDGER_HEAD_DESTINATION"):
        publish("ftp://example.org/")


def test_it_forgets_old_content_under_retention_while_the_chain_still_verifies(settings: Any) -> None:
    long_ago = timezone.now() - timedelta(days=40)
    old, new = Shown.of({"old": 1}), Shown.of({"new": 1})
    record(Decision(kind="admin.test_change", actor=system("a test"), decided={"n": 1}, shown=old, at=long_ago))
    record(Decision(kind="admin.test_change", actor=system("a test"), decided={"n": 2}, shown=new))
    Content.objects.filter(digest=old.digest).update(kept_at=long_ago)
    settings.HARNESS_LEDGER_CONTENT_RETENTION_DAYS = 30
    assert forget_shown_content() == 1
    entries = exported()
    assert "content" not in entries[0] and entries[0]["shown"] == old.digest
    assert entries[1]["content"] == new.canonical.decode()
    # The digests stay: the chain verifies, and proves what was decided and the digest
    # of what was shown, no longer the content itself.
    assert verify.verify(entries) is None


def test_it_exports_one_projects_chain_verifiable_alone(tmp_path: Path) -> None:
    decisions(9)  # three each: the default project, "tamper-other", no project
    other = Project.objects.get(slug="tamper-other")
    export = tmp_path / "other.jsonl"
    code, _out, err = run_command("ledger", "export", "--project", "tamper-other", "--output", str(export))
    assert code == 0 and f"3 entries exported of project tamper-other (verify with --project {other.pk})" in err, err
    entries, problem = verify.read_lines(export.read_text().splitlines())
    assert problem is None and [e["project_seq"] for e in entries] == [1, 2, 3] and {e["project"] for e in entries} == {other.pk}
    code, out, _err = run_command("ledger", "verify", str(export), "--project", str(other.pk))
    assert code == 0 and out.startswith(f"OK: 3 entries of project {other.pk}'s chain"), out
    # Checked as a whole export it is not one: the global chain's entries between are missing.
    assert problem_in_export(entries).what == "removed"
    # Against the project's head; an entry altered, removed or of another project is named.
    project_head = json.loads(run_command("ledger", "head", "--project", "tamper-other")[1])
    assert verify.verify(entries, verify.Head(project_head["digest"], project_head["seq"]), other.pk) is None
    altered = [dict(e) for e in entries]
    altered[1]["decided"] = {"n": 99}
    found = verify.verify(altered, project=other.pk)
    assert found is not None and found.what == "altered"
    found = verify.verify([entries[0], entries[2]], project=other.pk)
    assert found is not None and found.what == "removed" and found.seq == 2
    found = verify.verify(entries[:2], verify.Head(project_head["digest"], project_head["seq"]), other.pk)
    assert found is not None and found.what == "truncated"
    found = verify.verify(exported()[:1], project=other.pk)
    assert found is not None and found.what == "malformed"


def test_it_chains_entries_whose_values_need_escaping_as_the_verifier_encodes_them() -> None:
    # The writer spells an entry's canonical JSON out key by key (ledger.writer._entry_parts);
    # the verifier encodes it from the parsed export: quotes, backslashes, line breaks,
    # characters beyond ASCII and keys that are not strings come out the same.
    awkward = 'a "quoted" \\ back\nslash, café 日本 \u2028'
    other = Project.objects.create(slug="tamper-escaping", name="Escaping")
    for project in (default_project_id(), other.pk, None):
        record(
            Decision(
                kind=f"admin.{awkward}",
                actor=system(awkward),
                decided={"text": awkward, "numbered": {2: "two", 10: [1.5, None, True]}, "nested": {"z": 1, "a": awkward}},
                shown=Shown.of({"shown": awkward}),
                project_id=project,
                run_id=awkward[:36],
                policy_version=7 if project else None,
            )
        )
    assert verify_stored() is None
    entries = exported()
    assert verify.verify(entries, verify.Head.parse(f"{head()['seq']}:{head()['digest']}")) is None
    assert [e["decided"]["text"] for e in entries] == [awkward] * 3
    assert all(e["digest"] == verify.entry_digest(e) for e in entries)
