"""The CPU split of a run, read from ``/proc`` (Linux): what the cluster's processes, the order
system's process and the PostgreSQL backends of each database used in a window."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lab.bench.postgres import backend_pids

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_ticks() -> dict[int, tuple[int, int]]:
    """Every process's (session id, CPU ticks used so far), from ``/proc`` (Linux)."""
    ticks = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # it exited meanwhile
        # After the command's closing parenthesis: state is field 3, session 6, utime 14, stime 15.
        fields = stat.rpartition(")")[2].split()
        ticks[int(entry.name)] = (int(fields[3]), int(fields[11]) + int(fields[12]))
    return ticks


@dataclass
class CpuSplit:
    """The CPU each side of an end-to-end run used in its window, per apply: the cluster's
    processes (its session), the order system's process, and the PostgreSQL backends of each
    database, from ``/proc``. Who belongs to each side is read at the end (the order system
    opens a connection per client connection, the cluster may start workers), and a process
    that started in the window counts whole; one that started and exited in it is lost, which
    persistent connections make rare."""

    sessions: dict[str, int]
    databases: dict[str, str]
    before: dict[int, tuple[int, int]]

    @classmethod
    def start(cls, *, sessions: dict[str, int], databases: dict[str, str]) -> CpuSplit | None:
        if not Path("/proc/self/stat").exists():
            return None
        return cls(sessions=sessions, databases=databases, before=process_ticks())

    def per_apply_ms(self, applies: int) -> dict[str, float]:
        """Two reads of ``pg_stat_activity`` (transactions of this database)."""
        after = process_ticks()
        groups = {
            label: {pid for pid, (sid, _) in after.items() if sid == session}
            for label, session in self.sessions.items()
        }
        groups |= {label: backend_pids(db) for label, db in self.databases.items()}
        used = {}
        for label, pids in groups.items():
            ticks = sum(
                after[pid][1] - self.before.get(pid, (0, 0))[1] for pid in pids if pid in after
            )
            used[label] = ticks / CLOCK_TICKS * 1000 / applies
        return used
