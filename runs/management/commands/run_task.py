"""Run a contract with the scripted proposer in this process and print the report.
Exit codes: 0 complete, 10 waiting for approval, 1 any other stop, 2 bad input, 3 the
command failed (the cause in one line on stderr)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.errors import FieldProblem, InputError, json_message
from core.faults import parse_faults
from runs.cli import EXIT_BAD_INPUT, EXIT_ERROR, drive_and_report, one_line
from runs.runtime import create_run
from runs.services import registry


def read_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(what, [FieldProblem(path, exc.strerror or str(exc))]) from None
    except json.JSONDecodeError as exc:
        raise InputError(what, [FieldProblem(path, json_message(exc))]) from None


class Command(BaseCommand):
    help = "Run a task contract with a scripted proposer, in this process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("contract", help="path of the contract JSON")
        parser.add_argument("--script", required=True, help="JSON list of {tool, args} proposals, used in order")
        parser.add_argument("--fault", action="append", default=[], metavar="TOOL:KIND[:N]", help="inject executor faults")
        parser.add_argument("--json", action="store_true", help="print the report as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            contract = read_json(options["contract"], "contract")
            script = read_json(options["script"], "script")
            faults = parse_faults(options["fault"], registry().names)
            run = create_run(contract, {"kind": "scripted", "script": script}, None, enqueue=False)
        except InputError as exc:
            self.stderr.write(str(exc))
            sys.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # noqa: BLE001 - one line and an exit code, never a traceback
            self.stderr.write(f"the run could not be created: {one_line(exc)}")
            sys.exit(EXIT_ERROR)
        sys.exit(drive_and_report(self.stdout, self.stderr, str(run.pk), options["json"], faults))
