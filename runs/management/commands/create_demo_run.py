"""Start the example task on a worker: it reads the bug, patches it, runs the
tests in the sandbox and waits for a reviewer's approval to publish."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from runs.models import Run
from runs.runtime import create_run

DEMO = Path(settings.BASE_DIR) / "examples" / "demo"


class Command(BaseCommand):
    help = "Create the demo run (scripted proposer) and hand it to a worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", default="operator", help="who starts the run (default: the demo operator)")
        parser.add_argument("--once", action="store_true", help="none if the user started the demo task before (a second `make up`)")

    def handle(self, *args: Any, **options: Any) -> None:
        contract = json.loads((DEMO / "contract.json").read_text())
        script = json.loads((DEMO / "proposals.json").read_text())
        actor = get_user_model().objects.filter(username=options["user"]).first()
        before = Run.objects.filter(created_by=actor, task_id=contract["task_id"]).order_by("created_at").first()
        if options["once"] and before is not None:
            self.stdout.write(str(before.pk))
            return
        run = create_run(contract, {"kind": "scripted", "script": script}, actor)
        self.stdout.write(str(run.pk))
