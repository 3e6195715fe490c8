"""Real worker processes for drills: started, stopped (SIGSTOP), resumed (SIGCONT), killed.

``DrillWorker(["run_worker", "--apply", "D-41"], env=…)`` runs ``manage.py`` with that command.
A worker may also stop itself at a named point (``lab.drills.step_points``); ``stopped()``
tells the drill it got there. Every worker is killed when its drill ends (``close``): no stopped
process outlives a drill.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from django.conf import settings

MANAGE = Path(settings.BASE_DIR) / "manage.py"


class DrillWorker:
    def __init__(
        self, args: list[str], *, env: dict[str, str], label: str = "", session: bool = False
    ) -> None:
        self.args = args
        self.env = env
        self.label = label or " ".join(args)
        self._log = tempfile.NamedTemporaryFile(prefix="holdfast-drill-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            [sys.executable, str(MANAGE), *args],
            cwd=MANAGE.parent,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # Its own process group (a cluster and its worker processes), ended as one.
            start_new_session=session,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def stopped(self) -> bool:
        """The process is stopped (state ``T`` in ``/proc``): it reached its stop point."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[0] in ("T", "t")

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def outcome(self, timeout: float = 60) -> str:
        """Wait for the worker to exit; its last line (``D-41: done``)."""
        self.wait(timeout)
        lines = [line for line in self.output().splitlines() if line.strip()]
        return lines[-1] if lines else f"(no output, exit {self.process.returncode})"

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.resume()
            self.kill()
        self._log.close()


def wait_for(condition, *, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll ``condition()`` until it is truthy; return its value or raise ``TimeoutError``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


class DrillCluster(DrillWorker):
    """A worker cluster (``manage.py run_cluster``, django-q2 under Holdfast's liveness
    watchdog, the supported way to run it) the drill starts in its own process group:
    stopped with SIGTERM to its main process; what is left after ``grace`` seconds is killed
    (SIGKILL to the group the drill started, by its id)."""

    def __init__(self, *, env: dict[str, str], label: str = "cluster") -> None:
        super().__init__(["run_cluster"], env=env, label=label, session=True)

    def children(self) -> set[int]:
        """Every process of this cluster (its group), the main one included."""
        pids = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == self.pid:  # process group id
                pids.add(int(stat.parent.name))
        return pids

    def stop(self, grace: float = 15) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)

    def close(self) -> None:
        self.stop(grace=5)
        self._log.close()
