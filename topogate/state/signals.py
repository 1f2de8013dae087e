"""Work the watch handlers mark for the loops: jobs for the job sync, an admission cycle for the
admitter, workloads for the ungater. Marking never waits; each loop takes what was marked."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class Signals:
    """Work marked by handlers, taken by the loops."""

    jobs: set[tuple[str, str]] = field(default_factory=set)  # (kind, key)
    jobs_event: asyncio.Event = field(default_factory=asyncio.Event)
    admit_event: asyncio.Event = field(default_factory=asyncio.Event)
    ungate: set[str] = field(default_factory=set)  # workload keys
    ungate_event: asyncio.Event = field(default_factory=asyncio.Event)

    def job(self, kind: str, key: str) -> None:
        self.jobs.add((kind, key))
        self.jobs_event.set()

    def admit(self) -> None:
        self.admit_event.set()

    def ungate_workload(self, key: str) -> None:
        self.ungate.add(key)
        self.ungate_event.set()

    def take_jobs(self) -> set[tuple[str, str]]:
        self.jobs_event.clear()
        taken, self.jobs = self.jobs, set()
        return taken

    def take_ungates(self) -> set[str]:
        self.ungate_event.clear()
        taken, self.ungate = self.ungate, set()
        return taken
