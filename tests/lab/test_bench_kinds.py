"""The bench's end-to-end backlogs take every change kind in turn: each change it writes is
one the kind accepts, and ``--e2e-kinds`` refuses a kind the bench cannot write."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management.base import CommandError

from cases import kinds
from lab.bench.cli import e2e_kinds
from lab.bench.seeding import E2E_KINDS, kind_change


def test_the_bench_writes_a_valid_change_of_every_kind_the_product_ships():
    assert set(E2E_KINDS) == set(kinds.codes())
    day = dt.date(2027, 1, 8)
    for code in E2E_KINDS:
        changes = [kinds.canonical(kind_change(code, day, n)) for n in (1, 2)]
        for change in changes:
            assert kinds.validate(code, change) == {}, change
            assert change["kind"] == code
    addresses = [kind_change("shipping_address", day, n)["address"] for n in (1, 2)]
    assert addresses[0] != addresses[1]  # each order gets an address of its own


def test_e2e_kinds_default_to_all_and_refuse_an_unknown_one():
    assert e2e_kinds({"e2e_kinds": ",".join(E2E_KINDS)}) == E2E_KINDS
    assert e2e_kinds({"e2e_kinds": "delivery_date"}) == ("delivery_date",)
    with pytest.raises(CommandError, match="gift_wrap"):
        e2e_kinds({"e2e_kinds": "delivery_date,gift_wrap"})
    with pytest.raises(CommandError):
        e2e_kinds({"e2e_kinds": ""})
