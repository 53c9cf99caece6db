"""Check that each run's stored state is the one its event log explains: exit 0
when every run checked is consistent, 1 when any is not, 2 for bad input."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.cli import EXIT_BAD_INPUT, EXIT_STOPPED, run_by_id
from runs.models import Run
from runs.persistence.statecheck import state_problems


class Command(BaseCommand):
    help = "Fold each run's events and compare the result with its stored state (docs/design.md, Events)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", nargs="?")
        parser.add_argument("--all", action="store_true", help="check every run")

    def handle(self, *args: Any, **options: Any) -> None:
        if bool(options["run_id"]) == options["all"]:
            self.stderr.write("give one run id or --all")
            sys.exit(EXIT_BAD_INPUT)
        if options["all"]:
            runs = Run.objects.order_by("created_at").iterator()
        else:
            run = run_by_id(options["run_id"])
            if run is None:
                self.stderr.write(f"no run with id {options['run_id']!r}")
                sys.exit(EXIT_BAD_INPUT)
            runs = iter([run])
        checked = inconsistent = 0
        for run in runs:
            checked += 1
            problems = state_problems(run)
            if problems:
                inconsistent += 1
                for problem in problems:
                    self.stdout.write(f"run {run.pk}: {problem}")
        self.stdout.write(f"{checked} run(s) checked, {inconsistent} inconsistent")
        if inconsistent:
            sys.exit(EXIT_STOPPED)
