"""Readings of a sandbox container's cgroup from the host (the worker runs beside
the engine): how many processes are left after an execution, and how many times the
memory limit killed one. Either is None where the host does not show it."""

from __future__ import annotations

from pathlib import Path


class ContainerCgroup:
    """The cgroup files of one container, found once each (cgroup v1 or v2, under
    Docker's cgroupfs or systemd driver)."""

    def __init__(self, container_id: str, runtime: str) -> None:
        self.id = container_id
        self.runtime = runtime
        self._paths: dict[str, Path | None] = {}

    def _file(self, controller: str, name: str) -> Path | None:
        key = f"{controller}/{name}"
        if key not in self._paths:
            candidates = [
                Path(f"/sys/fs/cgroup/{controller}/docker/{self.id}/{name}"),
                Path(f"/sys/fs/cgroup/{controller}/system.slice/docker-{self.id}.scope/{name}"),
                Path(f"/sys/fs/cgroup/system.slice/docker-{self.id}.scope/{name}"),
                Path(f"/sys/fs/cgroup/docker/{self.id}/{name}"),
            ]
            self._paths[key] = next((p for p in candidates if p.exists()), None)
        return self._paths[key]

    def _read(self, controller: str, names: tuple[str, ...]) -> str | None:
        for name in names:
            path = self._file(controller, name)
            if path is not None:
                try:
                    return path.read_text()
                except OSError:
                    return None
        return None

    def pids_current(self) -> int | None:
        if self.runtime != "runc":
            return None  # the host cgroup counts gVisor's threads, not the sandbox's processes
        text = self._read("pids", ("pids.current",))
        return int(text) if text is not None and text.strip().isdigit() else None

    def oom_kills(self) -> int | None:
        text = self._read("memory", ("memory.oom_control", "memory.events"))
        if text is None:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None
