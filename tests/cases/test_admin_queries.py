"""The admin's list pages cost the same number of queries with 3 rows as with 30.

Every column a row shows is read with the page (``list_select_related`` or an annotation),
never by a query per row (no N+1), and no page counts every visible row a second time
(``show_full_result_count = False``).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from cases.models import Case, CaseEvent, EvidenceReference, Status
from cases.services import case_transition
from tests.cases.helpers import reload


def _queries(client, url: str, params: dict | None = None) -> tuple[int, object]:
    client.get(url, params or {})  # warm: sessions, permission caches, content types
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params or {})
    assert response.status_code == 200
    return len(captured.captured_queries), response


@pytest.fixture
def as_lead(client, lead):
    client.force_login(lead)
    return client


def _held(make_case, n: int) -> list[Case]:
    """``n`` held cases, each with two pieces of evidence (set up directly: how a case gets
    held is the watchdog's business, not this test's)."""
    cases = [make_case() for _ in range(n)]
    Case.objects.filter(pk__in=[c.pk for c in cases]).update(status=Status.HELD)
    for case in cases:
        for number in (1, 2):
            EvidenceReference.objects.create(
                case=case,
                source_system=EvidenceReference.Source.values[0],
                external_reference=f"{case.reference}-E{number}",
                kind="order_read",
                permitted_basis=EvidenceReference.Basis.values[0],
                captured_at=timezone.now() + timezone.timedelta(seconds=number),
                summary=f"order read {number}",
                recorded_by="test",
            )
    return cases


def _escalated(make_case, lead, n: int) -> list[Case]:
    cases = []
    for _ in range(n):
        case = reload(make_case())
        case_transition(
            case=case,
            transition="escalate",
            expected_version=case.version,
            reason="Needs a person",
            actor=lead,
        )
        cases.append(case)
    return cases


def test_case_changelist_query_count_does_not_grow_with_the_rows(as_lead, make_case):
    url = reverse("admin:cases_case_changelist")
    for _ in range(3):
        make_case()
    few, response = _queries(as_lead, url)
    assert response.context["cl"].result_count == 3
    for _ in range(27):
        make_case()
    many, response = _queries(as_lead, url)
    assert response.context["cl"].result_count == 30
    assert many == few


def test_the_case_lists_person_filters_read_the_people_once(as_lead, make_case, lead, backup):
    """Owner, responsible now and "to answer now" list the same people (the team's staff): one
    query for the three, each still offering every one of them."""
    make_case()
    as_lead.get(reverse("admin:cases_case_changelist"))  # warm: sessions, permissions
    with CaptureQueriesContext(connection) as captured:
        response = as_lead.get(reverse("admin:cases_case_changelist"))
    people = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith('SELECT DISTINCT "auth_user"')
    ]
    filters = {
        f.parameter_name: f
        for f in response.context["cl"].filter_specs
        if hasattr(f, "parameter_name")
    }

    assert len(people) == 1, people
    for name in ("owner", "responsible", "answer"):
        offered = {pk for pk, _ in filters[name].lookup_choices}
        assert {lead.pk, backup.pk} <= offered, name


def test_events_changelist_query_count_does_not_grow_with_the_rows(as_lead, make_case):
    url = reverse("admin:cases_caseevent_changelist")
    for _ in range(3):
        make_case()
    few, response = _queries(as_lead, url)
    per_case = response.context["cl"].result_count // 3
    assert per_case >= 1
    for _ in range(27):
        make_case()
    many, response = _queries(as_lead, url)
    assert response.context["cl"].result_count == 30 * per_case
    assert many == few


def test_held_queue_query_count_does_not_grow_with_the_rows(as_lead, make_case):
    url = reverse("admin:cases_heldcase_changelist")
    first = _held(make_case, 3)
    few, response = _queries(as_lead, url)
    assert response.context["cl"].result_count == 3
    body = response.content.decode()
    assert "2 references; latest: order read 2 (Order system," in body  # words, not ids
    assert f"{first[0].reference}-E2" not in body
    _held(make_case, 27)
    many, response = _queries(as_lead, url)
    assert response.context["cl"].result_count == 30
    assert many == few


def test_attention_queue_query_count_does_not_grow_with_the_rows(as_lead, make_case, lead):
    url = reverse("admin:cases_attentioncase_changelist")
    first = _escalated(make_case, lead, 3)
    few, response = _queries(as_lead, url)
    assert response.context["cl"].result_count == 3
    event = CaseEvent.objects.filter(case=first[0], to_status=Status.NEEDS_ATTENTION).get()
    assert timezone.localtime(event.created_at).strftime("%Y-%m-%d %H:%M") in (
        response.content.decode()
    )
    _escalated(make_case, lead, 27)
    many, response = _queries(as_lead, url)
    assert response.context["cl"].result_count == 30
    assert many == few


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("cases_case_changelist", {"q": "ORD"}),
        ("cases_caseevent_changelist", {"q": "CASE"}),
        ("cases_heldcase_changelist", {"q": "ORD"}),
        ("cases_attentioncase_changelist", {"q": "ORD"}),
        ("approvals_proposal_changelist", {"q": "ORD", "status": "awaiting_review"}),
    ],
)
def test_list_pages_count_their_rows_once(as_lead, make_case, name, params):
    """No second ``COUNT(*)`` over every visible row when a search narrows the page: it says
    "n results" without "(m total)"."""
    make_case()
    with CaptureQueriesContext(connection) as captured:
        response = as_lead.get(reverse(f"admin:{name}"), params)
    assert response.status_code == 200
    # The header's unread count (one indexed count of the person's own notifications) is not
    # a count of the list's rows.
    counts = [
        q["sql"]
        for q in captured.captured_queries
        if "COUNT(*)" in q["sql"] and "cases_notification" not in q["sql"]
    ]
    assert len(counts) <= 1, counts


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("lookup", "index"),
    [
        ({"reference__icontains": "D-1"}, "case_reference_trgm"),
        ({"order_id__icontains": "7731"}, "case_order_id_trgm"),
        ({"order_id__istartswith": "ORD"}, "case_order_id_trgm"),
        ({"account__reference__icontains": "ACC-1"}, "account_reference_trgm"),
    ],
)
def test_desk_search_by_reference_order_and_account_is_an_index_lookup(db, lookup, index):
    """The admin's search (``icontains``) by case reference, order id and account reference
    can use a trigram index (cases.0012), not only a scan of every case."""
    sql, params = Case.objects.filter(**lookup).query.sql_with_params()
    with connection.cursor() as cursor:
        # Leave the planner only lookups that use an index condition (a bitmap scan): a full
        # walk of another b-tree, filtering every row, is a scan under another name.
        for scan in ("seqscan", "indexscan", "indexonlyscan"):
            cursor.execute(f"SET LOCAL enable_{scan} = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert index in plan, plan


def _record_evidence(case: Case, actor, reference: str) -> None:
    """One piece of evidence, with its audit event, through the service."""
    from cases import services

    services.evidence_record(
        case=case,
        expected_version=reload(case).version,
        actor=actor,
        source_system="email",
        external_reference=reference,
        kind="customer_request",
        permitted_basis="contract",
        summary="The customer's mail",
    )


def test_the_case_page_and_the_events_list_name_who_acted_without_a_query_per_event(
    as_lead, lead, case
):
    """Each audit event reads who acted ("Lena Lead recorded evidence …"): the case page's
    audit trail and the events list read the person with the event, not once per event."""

    def record(n: int) -> None:
        for i in range(n):
            _record_evidence(case, lead, f"msg-{n}-{i}")

    def people_read(url: str, params: dict | None = None) -> int:
        as_lead.get(url, params or {})
        with CaptureQueriesContext(connection) as captured:
            assert as_lead.get(url, params or {}).status_code == 200
        return sum(
            q["sql"].startswith('SELECT "auth_user"."id"') and '"auth_user"."id" =' in q["sql"]
            for q in captured.captured_queries
        )

    page = reverse("admin:cases_case_change", args=[case.pk])
    events = reverse("admin:cases_caseevent_changelist")
    record(2)
    few = (people_read(page), _queries(as_lead, events, {"q": case.reference})[0])
    record(8)
    many = (people_read(page), _queries(as_lead, events, {"q": case.reference})[0])

    assert many == few


@pytest.mark.order_system
def test_the_case_page_costs_the_same_queries_however_long_the_cases_history(
    as_lead, lead, approved_case, live_orders, settings
):
    """A case page reads its history with the page: more attempts, evidence and audit events
    cost no more queries. Each audit event's name read its case again ("D-41 v7: …"): 46
    queries after one attempt, 58 after five."""
    from reconciliation.apply import apply_case

    settings.ATTEMPT_LIMIT = 20
    settings.RETRY_JITTER = 0
    case = approved_case()
    page = reverse("admin:cases_case_change", args=[case.pk])

    def grow(n: int) -> None:
        """``n`` more attempts, each refused before the order system's commit (a transient
        ending: the case is ready again), and ``n`` more pieces of evidence."""
        live_orders.set_fault("fail_before_commit", path_prefix="/orders/", times=n)
        for i in range(n):
            assert apply_case(case_id=case.pk) == "transient"
            _record_evidence(case, lead, f"msg-{n}-{i}")

    grow(1)
    few, _ = _queries(as_lead, page)
    events, attempts = CaseEvent.objects.filter(case=case).count(), case.attempts.count()
    grow(4)
    many, response = _queries(as_lead, page)

    assert case.attempts.count() == attempts + 4
    assert CaseEvent.objects.filter(case=case).count() >= events + 8
    assert response.content.decode().count(f"{case.reference}-a") >= 5  # every attempt shown
    assert many == few, (few, many)
