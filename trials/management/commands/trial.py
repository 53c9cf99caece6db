"""Trials from a shell: ``trial run --spec FILE`` (or ``--suite builtin``), ``trial
show ID``, ``trial export ID --format json|csv|html``, ``trial stop ID``. ``run``
makes the runs and, unless ``--no-wait``, follows them to their end (deciding the
requests of rule- and script-reviewed variants the workers' tasks have not yet
decided), then prints the comparison."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import InputError
from trials import report
from trials.models import Trial
from trials.service import create_trial, figures, review_waiting, stop_trial, tend
from trials.suite import start_suite, suite_rows


class Command(BaseCommand):
    help = "Trials: run --spec FILE | run --suite builtin, show ID, export ID --format json|csv|html, stop ID"

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        running = sub.add_parser("run")
        running.add_argument("--spec", help="a JSON file: {task, variants, k, name?, seed?}")
        running.add_argument("--suite", help="an evaluation set: builtin, or a suite file")
        running.add_argument("--k", type=int, help="repetitions per variant (a spec's own k otherwise; a suite's default 1)")
        running.add_argument("--seed", type=int, default=None)
        running.add_argument("--project")
        running.add_argument("--user", help="who starts the runs (default: the command line)")
        running.add_argument("--no-wait", action="store_true")
        running.add_argument("--timeout", type=float, default=1800)
        running.add_argument("--json", action="store_true")
        showing = sub.add_parser("show")
        showing.add_argument("id", type=int)
        showing.add_argument("--json", action="store_true")
        exporting = sub.add_parser("export")
        exporting.add_argument("id", type=int)
        exporting.add_argument("--format", choices=("json", "csv", "html"), default="json")
        exporting.add_argument("--output")
        exporting.add_argument("--run-base", default="/runs/", help="where the HTML report links runs (the site's URL + /runs/)")
        stopping = sub.add_parser("stop")
        stopping.add_argument("id", type=int)
        stopping.add_argument("--reason", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "run":
            self.run(options)
        elif action == "show":
            result = figures(tend(self.trial(options["id"])))
            self.stdout.write(json.dumps(result, indent=2) if options["json"] else report.text_table(result))
        elif action == "export":
            result = figures(tend(self.trial(options["id"])))
            text = {
                "json": lambda: json.dumps(result, indent=2),
                "csv": lambda: report.csv_text(result),
                "html": lambda: report.html_report(result, options["run_base"]),
            }[options["format"]]()
            if options["output"]:
                Path(options["output"]).write_text(text)
            else:
                self.stdout.write(text)
        else:
            trial = self.trial(options["id"])
            killed = stop_trial(trial, "command line", options["reason"])
            self.stdout.write(f"trial {trial.pk} {trial.status}: {killed} runs killed")

    def trial(self, trial_id: int) -> Trial:
        trial = Trial.objects.filter(pk=trial_id).first()
        if trial is None:
            raise CommandError(f"no trial {trial_id}")
        return trial

    def actor(self, options: dict[str, Any]) -> Any:
        if not options.get("user"):
            return None
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        return user

    def run(self, options: dict[str, Any]) -> None:
        try:
            if options["suite"]:
                skipped: list[tuple[str, str]] = []
                started = start_suite(
                    options["suite"],
                    self.actor(options),
                    k=options["k"] or 1,
                    project=options["project"],
                    seed=options["seed"] or 0,
                    skipped=skipped,
                )
                for task_name, why in skipped:
                    self.stderr.write(f"skipped {task_name}: {why}")
                trials = [trial for _, trial in started]
            elif options["spec"]:
                spec = json.loads(Path(options["spec"]).read_text())
                trials = [
                    create_trial(
                        task=spec.get("task"),
                        variants=spec.get("variants"),
                        k=options["k"] or spec.get("k", 1),
                        actor=self.actor(options),
                        project=options["project"] or spec.get("project"),
                        name=str(spec.get("name", "")),
                        seed=options["seed"] if options["seed"] is not None else int(spec.get("seed", 0)),
                    )
                ]
                started = []
            else:
                raise CommandError("run needs --spec FILE or --suite NAME")
        except InputError as exc:
            for problem in exc.problems:
                self.stderr.write(f"{problem.field}: {problem.message}")
            sys.exit(2)
        for trial in trials:
            self.stdout.write(f"trial {trial.pk}: {trial.name} ({trial.k} x {trial.variants.count()} runs)")
        if options["no_wait"]:
            return
        deadline = time.monotonic() + options["timeout"]
        while any(tend(t).status == Trial.Status.RUNNING for t in trials):
            if time.monotonic() > deadline:
                raise CommandError(f"the trials were still running after {options['timeout']} s")
            for trial in trials:
                review_waiting(trial)
            time.sleep(0.5)
        if started:
            self.suite_result(started, options)
            return
        for trial in trials:
            result = figures(trial)
            self.stdout.write(json.dumps(result, indent=2) if options["json"] else report.text_table(result))

    def suite_result(self, started: list[tuple[dict[str, Any], Trial]], options: dict[str, Any]) -> None:
        rows = suite_rows(started)
        self.stdout.write(json.dumps(rows, indent=2) if options["json"] else _suite_table(rows))
        problems = [problem for row in rows for problem in row["problems"]]
        for problem in problems:
            self.stderr.write(problem)
        if problems:
            sys.exit(1)


def _suite_table(rows: list[dict[str, Any]]) -> str:
    header = ["task", "trial", "expected", "outcomes", "success", "unsafe", "unauthorized", "as expected"]
    body = [
        [
            row["task"],
            str(row["trial"]),
            row["expected"],
            ", ".join(f"{k} x{v}" for k, v in row["outcomes"].items()),
            f"{row['successes']}/{row['runs']}",
            str(row["unsafe_attempts"]),
            str(row["unauthorized_effects"]),
            "yes" if not row["problems"] else "NO",
        ]
        for row in rows
    ]
    widths = [max(len(header[i]), *(len(r[i]) for r in body)) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [header, *body])
