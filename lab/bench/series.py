"""What every measurement of ``make bench`` reports into: a series of values over the rounds,
and the refusal of a measurement that cannot run here (``Skip``, with the reason)."""

from __future__ import annotations

import importlib
import importlib.util
import statistics
from dataclasses import dataclass, field
from typing import Any


class Skip(Exception):  # noqa: N818 - a measurement that cannot run here, with the reason
    pass


@dataclass
class Series:
    """One measurement over the rounds."""

    unit: str
    values: list[float] = field(default_factory=list)
    skipped: str = ""

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def text(self, digits: int = 0) -> str:
        if not self.values:
            return f"not measured ({self.skipped or 'no value'})"
        fmt = f"{{:,.{digits}f}}"
        return (
            f"{fmt.format(self.median)} {self.unit} "
            f"[{fmt.format(min(self.values))}–{fmt.format(max(self.values))}]"
        )


def ratio(a: Series, b: Series) -> str:
    if not a.values or not b.values or b.median == 0:
        return "n/a"
    return f"{a.median / b.median:.2f}×"


def ratio_value(a: Series, b: Series) -> float | None:
    if not a.values or not b.values or b.median == 0:
        return None
    return a.median / b.median


def optional_module(name: str) -> Any | None:
    """The module if it is there (other people are writing some of them), else None."""
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ModuleNotFoundError:
        return None
    return importlib.import_module(name)


def has_task(dotted: str) -> bool:
    module, _, name = dotted.rpartition(".")
    found = optional_module(module)
    return found is not None and callable(getattr(found, name, None))


def all_series() -> dict[str, Series]:
    """Every series a run fills, by the name the measurements and the report use."""
    return {
        "pg1": Series("tps"),
        "pg4": Series("tps"),
        "raw1": Series("claims/s"),
        "raw4": Series("claims/s"),
        "raw1_async": Series("claims/s"),  # 1 thread, commits not waiting for the disk
        "claim": Series("claims/s"),
        "queries": Series("queries"),
        "commits": Series("commits"),
        "next": Series("claims/s"),
        "next_queries": Series("queries"),
        "next_commits": Series("commits"),
        "noop": Series("tasks/s"),
        "e2e": Series("applies/s"),
        "e2e_vs_noop": Series("×"),
        "e2e_xact_raw": Series("transactions"),
        "e2e_xact": Series("transactions"),
        "idle_xact": Series("transactions/s"),
        "e2e_writes_raw": Series("write commits"),
        "e2e_writes": Series("write commits"),
        "idle_writes": Series("write commits/s"),
        "orders_xact": Series("transactions"),
        "cpu workers": Series("ms"),
        "cpu its PostgreSQL": Series("ms"),
        "cpu order system": Series("ms"),
        "cpu the order system's": Series("ms"),
        "cpu all": Series("ms"),
        "cpu noop": Series("ms"),
        "cpu noop before": Series("ms"),
        "multi": Series("applies/s"),
        "bare": Series("writes/s"),
        "cpu bare order system": Series("ms"),
        "cpu bare all": Series("ms"),
        "dbos": Series("writes/s"),
        "approve_p50": Series("ms"),
        "approve_p99": Series("ms"),
        "approve_max": Series("ms"),
        "load_admin_p95": Series("ms"),
        "load_api_p95": Series("ms"),
        "load_errors": Series("errors"),
        "load_e2e": Series("applies/s"),
        "rss_1k": Series("MiB"),
        "rss_10k": Series("MiB"),
    }
