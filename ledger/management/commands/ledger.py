"""``manage.py ledger``: the decision ledger from the command line.

    manage.py ledger export [--output FILE] [--project SLUG]   JSON Lines, the global chain's order
                                                  (or one project's chain, verifiable alone)
    manage.py ledger verify FILE [--head DIGEST] [--project ID]   the export checked offline (ledger.verify)
    manage.py ledger check                        the stored chain checked now, against its head
    manage.py ledger head [--project SLUG]        the head, as the beat publishes it
    manage.py ledger publish-head                 publish the head now

``verify`` needs no database: it is ``python3 -m ledger.verify``, which anyone holding
an export runs with that one file."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import verify as offline
from ledger.export import head, verify_stored, write_export
from ledger.publish import publish


class Command(BaseCommand):
    help = "Export, verify and publish the decision ledger."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True)
        export = commands.add_parser("export", help="every entry as JSON Lines")
        export.add_argument("--output", "-o", default="-", help="a file (default: standard output)")
        export.add_argument("--project", help="one project's chain alone (its slug)")
        check = commands.add_parser("verify", help="verify an export offline")
        check.add_argument("file")
        check.add_argument("--head", help="the published head: DIGEST or SEQ:DIGEST")
        check.add_argument("--project", help="the export is this project's chain (its id)")
        commands.add_parser("check", help="verify the stored chain now")
        heads = commands.add_parser("head", help="print the head")
        heads.add_argument("--project", help="a project's head (its slug)")
        commands.add_parser("publish-head", help="publish the head now")

    def handle(self, *args: Any, **options: Any) -> None:
        command = options["command"]
        if command == "export":
            project = _project(options["project"])
            if options["output"] == "-":
                count = write_export(self.stdout, project)
            else:
                with open(options["output"], "w", encoding="utf-8") as out:
                    count = write_export(out, project)
            of = f" of project {options['project']} (verify with --project {project})" if project is not None else ""
            self.stderr.write(f"{count} entries exported{of}")
        elif command == "verify":
            argv = [options["file"], *(["--head", options["head"]] if options["head"] else [])]
            argv += ["--project", options["project"]] if options["project"] else []
            code = _captured(self, lambda: offline.main(argv))
            if code:
                sys.exit(code)
        elif command == "check":
            problem = verify_stored()
            if problem is not None:
                raise CommandError(f"FAILED: {problem}")
            self.stdout.write("OK: the stored chain holds, up to its head")
        elif command == "head":
            self.stdout.write(json.dumps(head(_project(options["project"])), sort_keys=True))
        else:
            self.stdout.write(json.dumps(publish(), sort_keys=True))


def _project(slug: str | None) -> int | None:
    """A project's id by its slug (the ledger names projects by id: they may be gone)."""
    if not slug:
        return None
    # By the app registry: the ledger sits below the projects app.
    found = apps.get_model("projects", "Project").objects.filter(slug=slug).values_list("pk", flat=True).first()
    if found is None:
        raise CommandError(f"no project {slug!r}")
    return int(found)


def _captured(command: BaseCommand, run: Any) -> int:
    """The offline verifier's exit code, its words on the command's own stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = int(run())
    command.stdout.write(out.getvalue().rstrip("\n"))
    return code
