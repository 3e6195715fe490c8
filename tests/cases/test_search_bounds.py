"""The list pages' search reads a bounded number of rows (``cases.search``), and hands the
page its keys as one value (``cases.lookups``)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cases import search
from cases.models import Case, CustomerAccount

pytestmark = pytest.mark.django_db


def test_among_finds_what_in_finds(make_case, account):
    cases = [make_case() for _ in range(4)]
    keys = [case.pk for case in cases[:3]]
    assert set(Case.objects.filter(pk__among=keys)) == set(Case.objects.filter(pk__in=keys))
    assert set(Case.objects.filter(pk__among=[*keys, None])) == set(cases[:3])
    assert set(Case.objects.filter(account__among=[account.pk])) == set(cases)
    assert set(Case.objects.exclude(pk__among=keys)) == {cases[3]}
    assert not Case.objects.filter(pk__among=[]).exists()


def _page_params(found) -> list:
    sql, params = found.query.get_compiler(connection.alias).as_sql()
    return list(params)


@pytest.mark.postgres_only
def test_the_page_gets_its_keys_as_one_array_however_many_matched(make_case):
    """The page's statement is the same text for 2 keys as for 20 (at 1M cases, 800 keys made
    three statements too long for psycopg to keep their conversion: a quarter of the API's
    three-word search in a profile)."""
    for n in range(20):
        make_case(order_id=f"ORD-55{n:02d}")
    few, _ = search.indexed_search(Case.objects.all(), search.CASE_FIELDS, "ORD-5501")
    many, _ = search.indexed_search(Case.objects.all(), search.CASE_FIELDS, "ORD-55")
    assert few.count() == 1
    assert many.count() == 20
    assert len(_page_params(few)) == len(_page_params(many))
    sql = str(many.query)
    assert "= ANY(" in sql, sql


def test_a_word_whose_key_is_in_more_rows_than_the_cap_is_not_answered_in_full(
    make_case, monkeypatch
):
    """``ZZ-100`` asks the index for ``100``: when more rows than the cap hold that, only the
    cap's worth are checked for the whole word, and the search says its answer is cut, not
    that nothing else matches (at 1M cases, 4,000 references held ``100`` and none ``ORD-100``:
    checking them all read 1,161 pages of the table)."""
    monkeypatch.setattr(search, "RESOLVED_MATCHES", 3)
    others = [make_case(order_id=f"ORD-100{n}") for n in range(6)]
    target = make_case(order_id="ZZ-100")
    found, truncated = search.indexed_search(Case.objects.all(), ["order_id"], "ZZ-100")
    assert truncated
    assert set(found) <= {target}
    # A word whose key few rows hold is answered in full.
    found, truncated = search.indexed_search(Case.objects.all(), ["order_id"], "ORD-1003")
    assert not truncated
    assert list(found) == [others[3]]
    # Under the cap, the whole word is checked on every row its key is in.
    monkeypatch.setattr(search, "RESOLVED_MATCHES", 10)
    found, truncated = search.indexed_search(Case.objects.all(), ["order_id"], "ZZ-100")
    assert not truncated
    assert list(found) == [target]


def test_when_every_word_is_cut_the_page_reads_at_most_the_cap_of_keys(make_case, monkeypatch):
    """Two fields' capped keys can make twice the cap; a cut answer keeps the cap's worth."""
    monkeypatch.setattr(search, "RESOLVED_MATCHES", 3)
    for n in range(3):
        make_case(order_id=f"ORD-9{n}", request_key=f"other-{n}")
    for n in range(5):
        make_case(order_id=f"ORD-8{n}", request_key=f"key-9{n}")
    # "9" -- no key run: the reference has none, the order ids three, the request keys five.
    found, truncated = search.indexed_search(Case.objects.all(), ["order_id", "request_key"], "9")
    assert truncated
    assert len(_keys_of(found)) <= 4


def _keys_of(found) -> list:
    return list(found.values_list("pk", flat=True))


def test_the_api_says_when_its_search_was_cut(api, lead, make_case, monkeypatch):
    """The admin says so in a message; the API said nothing and listed fewer cases than match."""
    monkeypatch.setattr(search, "RESOLVED_MATCHES", 3)
    for n in range(6):
        make_case(order_id=f"ORD-70{n}")
    client = api(lead)
    cut = client.get("/api/cases/", {"q": "ORD-70"}).json()
    assert cut["search_cut"] is True
    assert 0 < len(cut["results"]) <= 4
    whole = client.get("/api/cases/", {"q": "ORD-703"}).json()
    assert whole["search_cut"] is False
    assert [row["order_id"] for row in whole["results"]] == ["ORD-703"]
    assert client.get("/api/cases/").json()["search_cut"] is False


def test_a_search_asks_at_most_ten_distinct_words(api, lead, make_case, client):
    """Sixty words that many cases hold took 2.4 s at 1M cases: each costs up to two capped
    queries per field. A word said again asks nothing more; past ten words the API refuses
    and the admin searches the first ten, saying so."""
    case = make_case(order_id="ORD-4242")
    many = " ".join(f"w{n}" for n in range(11))
    assert search.words_of("Customer customer CUSTOMER 'a b' x") == ["Customer", "a b", "x"]
    assert search.words_of('"" x " "') == ["x"]
    everything = api(lead).get("/api/cases/", {"q": '""'}).json()
    assert everything["search_cut"] is False
    assert [row["reference"] for row in everything["results"]] == [case.reference]
    assert search.too_many_words(" ".join(["Customer"] * 60)) == ""
    assert search.too_many_words(many) == "Search with at most 10 words; this search has 11."

    refused = api(lead).get("/api/cases/", {"q": many})
    assert refused.status_code == 400
    assert refused.json()["fields"] == {"q": ["Search with at most 10 words; this search has 11."]}
    repeated = api(lead).get("/api/cases/", {"q": " ".join(["ORD-4242"] * 60)}).json()
    assert [row["reference"] for row in repeated["results"]] == [case.reference]

    client.force_login(lead)
    page = client.get("/admin/cases/case/", {"q": f"ORD-4242 {many}"}, follow=True)
    assert page.status_code == 200
    shown = [str(m) for m in page.context["messages"]]
    assert any("at most 10 words; this search has 12" in m and "first 10" in m for m in shown)
    # The first ten words were asked: the order id among them, the rest found nowhere.
    assert list(page.context["cl"].result_list) == []
    found = client.get("/admin/cases/case/", {"q": "ORD-4242"})
    assert list(found.context["cl"].result_list) == [case]


def test_the_case_list_filters_a_full_text_search_on_one_set_of_ids(make_case, lead, client):
    """The references' search and the full-text search (notes, reasons, the timeline) each
    give a capped set of ids. Filtered as "these ids OR that subquery", PostgreSQL read every
    case for it: 314 ms for "customer" at 1M cases, against 11 ms as one set of ids."""
    noted = make_case(note="The parcel driver called.")
    referenced = make_case(order_id="ORD-PARCEL-1")
    make_case(order_id="ORD-OTHER")
    client.force_login(lead)
    with CaptureQueriesContext(connection) as captured:
        page = client.get("/admin/cases/case/", {"q": "parcel"})
    assert set(page.context["cl"].result_list) == {noted, referenced}
    subqueries = [q["sql"] for q in captured.captured_queries if '"id" IN (SELECT' in q["sql"]]
    assert not subqueries, subqueries


def test_a_search_runs_as_many_queries_whatever_its_words_match(make_case, monkeypatch):
    """Every word's capped keys are read in one statement. Asked word by word and field by
    field, stopping at the first word under the cap, a search ran more queries the more rows
    its words matched: make bench's three-word search ran 27 queries at 10k cases and 30 at
    1M (the admin), 15 and 18 (the API), where a page must run as many at every size."""
    monkeypatch.setattr(search, "RESOLVED_MATCHES", 3)

    def asked(term: str) -> tuple[int, set[int], bool]:
        with CaptureQueriesContext(connection) as captured:
            found, truncated = search.indexed_search(Case.objects.all(), search.CASE_FIELDS, term)
            keys = set(_keys_of(found))
        return len(captured.captured_queries), keys, truncated

    first = make_case(order_id="ORD-77", request_key="parcel-one")
    few = asked("ORD-77 parcel")
    others = [make_case(order_id=f"ORD-77{n}", request_key=f"parcel-{n}") for n in range(6)]
    many = asked("ORD-77 parcel")
    assert few == (2, {first.pk}, False)
    # Both words are now in more rows than the cap: the answer is cut, and as many queries ran.
    assert many[0] == 2
    assert many[2] is True
    assert many[1] <= {first.pk, *(case.pk for case in others)}


def test_a_word_with_a_nul_matches_nothing_and_asks_nothing(api, lead, make_case, client):
    """No stored text holds a NUL (PostgreSQL refuses one in text), so a word with one matches
    no row: the page is empty, not a 500 ("PostgreSQL text fields cannot contain NUL (0x00)
    bytes", found by the API's schema fuzzing with ``q`` holding a NUL)."""
    case = make_case(order_id="ORD-4343")
    for term in ("a\x00b", "ORD-4343 a\x00b", "\x00", "ORD-4343 \x00"):
        with CaptureQueriesContext(connection) as captured:
            found, truncated = search.indexed_search(Case.objects.all(), search.CASE_FIELDS, term)
            assert list(found) == [], term
        assert truncated is False
        assert len(captured.captured_queries) == 0, term
    answer = api(lead).get("/api/cases/", {"q": "ORD-4343 a\x00b"})
    assert answer.status_code == 200
    assert answer.json()["results"] == []
    assert [
        r["reference"] for r in api(lead).get("/api/cases/", {"q": "ORD-4343"}).json()["results"]
    ] == [case.reference]
    client.force_login(lead)
    page = client.get("/admin/cases/case/", {"q": "ORD-4343 a\x00b"})
    assert page.status_code in (200, 302)


WORDS = [
    "ORD-1005000",  # a key and the whole word
    "northwind",  # the word is its key
    "50%",  # the pattern's own characters, escaped
    "a_b",
    "back\\slash",
    "it's",
    "Ünïcödé-7",
    "hfkeystandinqzx",  # what the statement is compiled with, as a word
    "hfwordstandinqzx-hfkeystandinqzx",
    "ab",  # no run of three: the whole word alone
]


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("field", ["reference", "order_id", "request_key"])
def test_a_read_compiled_once_binds_each_word_as_the_orm_does(field, word):
    """The capped reads' statements are compiled once per field and shape (3.3 ms of a
    three-word search's every request compiled them through the ORM): each word's SQL and
    params are those the ORM gives for it."""
    rows = Case.objects.all()
    limit = search.RESOLVED_MATCHES + 1

    cached = search._capped_sql(rows, field, word, limit)
    cached_again = search._capped_sql(rows, field, word, limit)
    compiled = search._sql(search._capped(rows, field, search._key_of(word), word, limit))

    assert cached == compiled
    assert cached_again == compiled


def test_a_search_with_the_patterns_characters_finds_them_as_typed(make_case, team):
    """Bound into a statement compiled once, ``%`` and ``_`` are still the characters typed,
    not patterns: ``50%`` does not find "Half 5000 Off", nor ``a_b`` "AXB Traders"."""
    names = ["Half 50% Off", "Half 5000 Off", "A_B Traders", "AXB Traders"]
    cases = {}
    for n, name in enumerate(names):
        account = CustomerAccount.objects.create(
            reference=f"ACC-9{n}", name=name, team=team, verified=True
        )
        cases[name] = make_case(account=account, order_id=f"ORD-9{n}")

    def found(term):
        rows, _ = search.indexed_search(Case.objects.all(), search.CASE_FIELDS, term)
        return {case.account.name for case in rows}

    assert found("50%") == {"Half 50% Off"}
    assert found("half 50%") == {"Half 50% Off"}
    assert found("a_b") == {"A_B Traders"}
    assert found("traders a_b") == {"A_B Traders"}
    assert found("ORD-91") == {"Half 5000 Off"}
