"""The bench's machine line (``lab.bench.machine``): the cores, the load before the run and the
share of CPU time the hypervisor gave to other machines over it, so that two runs' ratios are
compared only when their machines were alike."""

from __future__ import annotations

from lab.bench.machine import CpuTimes, Machine, calibrate, cpu_model, cpu_times

STAT = """cpu  100 5 50 800 20 0 5 20 0 0
cpu0 50 2 25 400 10 0 3 10 0 0
intr 1 2 3
"""


def test_the_cpu_times_are_read_from_the_first_line_of_proc_stat():
    assert cpu_times(STAT) == CpuTimes(total=1000, steal=20)
    assert cpu_times("intr 1 2 3\n") is None
    assert cpu_times("") is None


def test_an_old_kernels_line_without_steal_counts_none():
    assert cpu_times("cpu  100 0 50 800\n") == CpuTimes(total=950, steal=0)


def test_the_cpu_model_is_named_or_said_unknown():
    assert cpu_model("processor\t: 0\nmodel name\t: Some  CPU @ 2.10GHz\n") == "Some CPU @ 2.10GHz"
    assert cpu_model("") == "CPU model unknown"


def test_the_line_gives_the_share_of_cpu_time_stolen_over_the_run():
    machine = Machine(
        cores=2,
        model="Some CPU",
        load_at_start=0.42,
        times_at_start=CpuTimes(1000, 20),
        calibration_ms=20.04,
    )
    line = machine.line(CpuTimes(total=3000, steal=120), calibration_at_end=25.0)
    assert line.startswith(
        "machine: 2 cores (Some CPU), load 0.42 at the start; "
        "calibration 20.0 ms at the start, 25.0 at the end"
    )
    assert "; 5.0% of its CPU time given to other machines over the run" in line


def test_the_line_says_so_when_the_cpu_times_cannot_be_read():
    machine = Machine(
        cores=4, model="x", load_at_start=None, times_at_start=None, calibration_ms=1.0
    )
    line = machine.line(CpuTimes(10, 0), calibration_at_end=1.0)
    assert line.startswith("machine: 4 cores (x); calibration 1.0 ms at the start")
    assert line.endswith("; CPU time stolen by other machines: not readable here")


def test_a_reading_of_this_machine_gives_a_line():
    machine = Machine.now()
    assert machine.calibration_ms > 0
    assert machine.line().startswith("machine: ")


def test_the_calibration_is_the_best_of_its_tries():
    assert 0 < calibrate(tries=3) < 10_000
