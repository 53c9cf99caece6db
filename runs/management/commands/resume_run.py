"""Continue a waiting or interrupted run in this process and print the report."""

from __future__ import annotations

import sys
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.cli import EXIT_BAD_INPUT, exit_code, print_report
from runs.models import Run
from runs.runtime import advance


class Command(BaseCommand):
    help = "Continue a run (e.g. after an approval) with its stored proposer."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        run = Run.objects.filter(pk=_uuid_or_none(options["run_id"])).first()
        if run is None:
            self.stderr.write(f"no run with id {options['run_id']!r}")
            sys.exit(EXIT_BAD_INPUT)
        outcome = advance(str(run.pk))
        if outcome == "leased_elsewhere":
            self.stderr.write("another worker is driving this run right now")
        run.refresh_from_db()
        print_report(self.stdout, run, options["json"])
        sys.exit(exit_code(run))


def _uuid_or_none(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None
