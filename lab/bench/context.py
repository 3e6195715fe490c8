"""One run of ``make bench``: where it writes, what it has measured so far, and the notes its
report needs. Every measurement takes the run and adds to its series."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.bench.machine import Machine
from lab.bench.postgres import Overhead
from lab.bench.series import Series, Skip, all_series


@dataclass
class PendingOrders:
    """The order system's transactions of one end-to-end run, read once its backends flushed."""

    before: int
    applies: int
    own: int  # transactions the bench itself made there meanwhile
    ended: float


@dataclass
class Run:
    """The bench database ``db_name`` (its scratch databases are named after it), this run's
    id (in the names of the rows it writes), its log directory and output, and its series."""

    db_name: str
    run_id: str
    log_dir: Path
    idle_seconds: float
    e2e_mode: str
    out: Any  # the command's stdout (write, flush)
    overhead: Overhead
    series: dict[str, Series] = field(default_factory=all_series)
    pending_orders: PendingOrders | None = None
    others_active: dict[str, int] = field(default_factory=dict)
    writes_clean: list[bool] = field(default_factory=list)  # per end-to-end round: no burst
    cluster_enqueued: list[int] = field(default_factory=list)  # per end-to-end round
    fixture: dict[str, Any] = field(default_factory=dict)  # the account and people of its cases
    mail: Any = None  # the customers' mail server (``lab.bench.mailsink.MailSink``), if it runs
    # The change kinds the end-to-end backlogs take in turn (``--e2e-kinds``).
    e2e_kinds: tuple[str, ...] = ("delivery_date",)
    machine: Machine | None = None  # read at the start (``lab.bench.machine``)

    @property
    def orders_db(self) -> str:
        return f"{self.db_name}_orders"

    @property
    def pgbench_db(self) -> str:
        return f"{self.db_name}_pgbench"

    def write(self, line: str) -> None:
        self.out.write(line)

    def attempt(self, series: Series, measure: Callable[[], float | None]) -> None:
        """Add what ``measure`` returns to ``series``; a ``Skip`` marks the series skipped
        (and it is not measured again)."""
        if series.skipped:
            return
        try:
            value = measure()
        except Skip as exc:
            series.skipped = str(exc)
            self.write(f"  skipped: {exc}")
            return
        if value is not None:
            series.add(value)
