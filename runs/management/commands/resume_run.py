"""Continue a waiting or interrupted run in this process and print the report."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.cli import EXIT_BAD_INPUT, EXIT_ERROR, drive_and_report, one_line, run_by_id


class Command(BaseCommand):
    help = "Continue a run (e.g. after an approval) with its stored proposer."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run = run_by_id(options["run_id"])
        except Exception as exc:  # noqa: BLE001 - one line and an exit code, never a traceback
            self.stderr.write(f"the run could not be looked up: {one_line(exc)}")
            sys.exit(EXIT_ERROR)
        if run is None:
            self.stderr.write(f"no run with id {options['run_id']!r}")
            sys.exit(EXIT_BAD_INPUT)
        sys.exit(drive_and_report(self.stdout, self.stderr, str(run.pk), options["json"]))
