"""The load run's parsing and arithmetic (``lab.bench.locustfile``), no load: what locust's
listener writes per answer is read back into the admin's and the API's p95 and the errors,
and each role's pages are pages the list bench knows."""

from __future__ import annotations

from lab.bench import load
from lab.bench.locustfile import ADMIN, API, p95, record, summarise, surface_of


def test_a_recorded_answer_is_read_back_per_surface_with_its_p95_and_errors():
    lines = [record(ADMIN, "admin changelist", float(ms), None) for ms in range(1, 101)]
    lines += [record(API, "API case list", float(ms), None) for ms in range(1, 21)]
    lines.append(record(API, "API case list", 7.0, "HTTP 500\tInternal\nerror"))
    lines.append("admin\tbroken line\n")  # a partial last line of a killed run
    lines.append("\n")

    summary = summarise(lines)

    assert summary.admin_p95_ms == 95.0  # nearest rank: the 95th of 1..100
    assert summary.api_p95_ms == 19.0  # the 20th of 21 values: 1..20 and 7
    assert summary.requests == 122
    assert summary.errors == 2
    assert summary.first_errors[0] == "API case list: HTTP 500 Internal error"
    assert summary.first_errors[1].startswith("unreadable line")


def test_p95_is_the_nearest_rank_and_zero_for_nothing():
    assert p95([]) == 0.0
    assert p95([42.0]) == 42.0
    assert p95([float(v) for v in range(20, 0, -1)]) == 19.0


def test_each_role_asks_pages_of_the_list_bench_on_both_surfaces():
    pages = load.role_pages()
    assert set(pages) == {"agent", "approver", "lead"}
    paths = [path for entries in pages.values() for _name, path, _params in entries]
    assert {surface_of(path) for path in paths} == {ADMIN, API}
    assert all(path.startswith(("/admin/", "/api/")) for path in paths)
