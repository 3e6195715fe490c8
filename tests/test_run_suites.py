"""``make test``'s side databases are named after ``TEST_DATABASE_URL``'s, so that two checkouts
run the suites side by side on one PostgreSQL server without sharing a database."""

from __future__ import annotations

from tests.run_suites import side_database


def test_side_databases_are_named_after_the_test_database():
    url = "postgres://postgres@127.0.0.1:5432/hf_lab"

    assert side_database(url, "browser") == "postgres://postgres@127.0.0.1:5432/hf_lab_browser"
    assert side_database(url, "drills") == "postgres://postgres@127.0.0.1:5432/hf_lab_drills"
    assert side_database(url, "orders") == "postgres://postgres@127.0.0.1:5432/hf_lab_orders"


def test_two_checkouts_get_different_side_databases():
    first = side_database("postgres://postgres@127.0.0.1:5432/hf_one", "browser")
    second = side_database("postgres://postgres@127.0.0.1:5432/hf_two?sslmode=disable", "browser")

    assert first != second
    assert second == "postgres://postgres@127.0.0.1:5432/hf_two_browser?sslmode=disable"


def test_the_default_server_keeps_its_names():
    assert side_database("postgres://postgres@127.0.0.1:5432/holdfast", "drills").endswith(
        "/holdfast_drills"
    )
