"""Where a run's calls execute. Kept apart from the services so the sandbox can
build one without importing them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runs.core.ports import Executor, Workspace


@dataclass
class Environment:
    executor: Executor
    workspace: Workspace
    close: Callable[[], None] = lambda: None  # remove the run's container at the end
    kill: Callable[[], None] = lambda: None  # kill the execution in flight (kill switch)
