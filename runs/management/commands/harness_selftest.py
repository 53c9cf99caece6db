"""Run the runtime's contract scenarios and print one row per control."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.scenarios import run_scenarios


class Command(BaseCommand):
    help = "Check that every safety control of the harness core holds; exits non-zero if one fails."

    def handle(self, *args: object, **options: object) -> None:
        results = run_scenarios()
        width = max(len(control) for control, _, _ in results)
        self.stdout.write(f"{'control'.ljust(width)}  result  detail")
        for control, ok, detail in results:
            self.stdout.write(f"{control.ljust(width)}  {'PASS' if ok else 'FAIL':6}  {detail}")
        failed = [control for control, ok, _ in results if not ok]
        if failed:
            raise CommandError(f"{len(failed)} control(s) failed: {'; '.join(failed)}")
        self.stdout.write(f"all {len(results)} controls hold")
