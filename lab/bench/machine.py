"""The machine a bench ran on, and how busy it was with other work: the line that says whether
two runs' ratios can be compared.

The same code gave a claim at 0.54x raw ``SKIP LOCKED`` on one machine and 0.25x on another,
and on one machine the bare write anchor ran at 253 to 400 writes/s in five runs of one hour.
A virtual machine's cores are shared, and not every hypervisor tells its guests (this kind's
reports almost no *steal* in ``/proc/stat`` while its speed moves): so the line also times one
fixed piece of pure Python work (:func:`calibrate`) at the start and at the end. Two runs whose
calibrations differ ran on machines of different speeds, whatever their steal says.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# /proc/stat's first line: "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
_STEAL = 7  # index of steal among the numbers


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time so far (``/proc/stat``, in ticks): all of it and the stolen."""

    total: int
    steal: int


def cpu_times(stat_text: str) -> CpuTimes | None:
    """The first line of ``/proc/stat`` read; None when it is not there as Linux writes it."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            numbers = [int(x) for x in fields[1:]]
            # guest and guest_nice are already counted in user and nice
            total = sum(numbers[:8])
            steal = numbers[_STEAL] if len(numbers) > _STEAL else 0
            return CpuTimes(total=total, steal=steal)
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_model(cpuinfo_text: str) -> str:
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return "CPU model unknown"


def calibrate(tries: int = 5) -> float:
    """The best of ``tries`` timings of one fixed piece of pure Python work, in ms (about 20 ms
    on the machine this was written on): the machine's speed for one process at that moment."""
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        total = 0
        for i in range(300_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - start)
    return best * 1000


@dataclass(frozen=True)
class Machine:
    """Read at the bench's start; :meth:`line` reads again at its end."""

    cores: int
    model: str
    load_at_start: float | None
    times_at_start: CpuTimes | None
    calibration_ms: float

    @classmethod
    def now(cls) -> Machine:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return cls(
            cores=os.cpu_count() or 1,
            model=cpu_model(_read("/proc/cpuinfo")),
            load_at_start=load,
            times_at_start=cpu_times(_read("/proc/stat")),
            calibration_ms=calibrate(),
        )

    def line(
        self, times_at_end: CpuTimes | None = None, calibration_at_end: float | None = None
    ) -> str:
        """``machine: 2 cores (…), load 0.31 at the start; calibration 21.0 ms at the start,
        23.5 at the end; 1.8% of its CPU time given to other machines over the run (…)``."""
        end = times_at_end if times_at_end is not None else cpu_times(_read("/proc/stat"))
        again = calibration_at_end if calibration_at_end is not None else calibrate()
        parts = [f"machine: {self.cores} cores ({self.model})"]
        if self.load_at_start is not None:
            parts[0] += f", load {self.load_at_start:.2f} at the start"
        parts.append(
            f"calibration {self.calibration_ms:.1f} ms at the start, {again:.1f} at the end "
            "(one fixed piece of Python work, best of 5: a run with a larger one ran on a "
            "slower machine)"
        )
        start = self.times_at_start
        if start is not None and end is not None and end.total > start.total:
            stolen = (end.steal - start.steal) / (end.total - start.total)
            parts.append(
                f"{100 * stolen:.1f}% of its CPU time given to other machines over the run "
                "(steal: above a few percent, ratios of this run are not comparable with "
                "another machine's)"
            )
        else:
            parts.append("CPU time stolen by other machines: not readable here")
        return "; ".join(parts)
