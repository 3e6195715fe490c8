"""One writer per rule, checked on the source: each rule's fields are written in one place.

- ``Attempt.state`` (and ``cancel_requested_at``): ``cases.attempts`` only;
- an operation's confirmation (``confirmed_at``, ``result_order_version``):
  ``reconciliation.settle.operation_confirm`` only;
- closing a proposal and revoking its approvals: the public ``approvals.services`` writers
  (``proposal_withdraw``, …); nothing outside ``approvals`` uses the private helpers;
- marking cancellations that arrived after the change: ``reconciliation.complete.case_complete``;
- the retry counters (``retry_count``, ``retry_counts``): ``cases.retries`` only;
- an attempt's lease renewal (``lease_expires_at``, ``heartbeat_at``): ``reconciliation.leases``
  only (the claim writes the new attempt's first lease, with ``leases.lease_expiry``);
- a case's status: ``cases.kernel`` only (``apply_transition``, and the claim's
  compare-and-set ``claim_transition`` + ``claim_write``);
- saving an audit event of a case: ``cases.kernel`` only (``record_event``, ``writes_batched``,
  ``claim_write``); everyone else builds through ``record_event`` / ``record_fact``;
- fencing tokens: ``cases.fencing`` only (``next_fencing_token``; the claim's read embeds
  ``next_fencing_token_sql``).

A raw-SQL fast path counts as a writer too: string literals and f-strings that UPDATE the case
table's status, INSERT into the events table, take ``nextval`` of the fencing sequence or set
``lease_expires_at`` are found in the source and must be in the rule's one module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("cases", "approvals", "reconciliation")
# Files of these apps that seed a benchmark database in bulk, not writers of the workflow (the
# bench's own seeding lives in lab/, which this scan does not read).
SEEDING: set[str] = set()


def _sources():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/migrations/" in rel or rel in SEEDING:
                continue
            yield rel, ast.parse(path.read_text(), filename=rel)


# Calls whose keyword arguments are field values written (a filter's are not).
WRITE_CALLS = {
    "update",
    "create",
    "get_or_create",
    "update_or_create",
    "apply_transition",
    "case_complete",
    "attempt_set_state",
    "attempt_finish",
}


# What builds a case's audit event, and the calls that save or insert rows.
EVENT_BUILDERS = {"event_row", "CaseEvent"}
EVENT_SAVES = {"save", "create", "bulk_create", "insert", "insert_values"}


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


class _Writes(ast.NodeVisitor):
    """Every write of a field: ``x.field = …``, ``x.field += …``, ``….update(field=…)`` and
    keyword arguments of writer calls (``apply_transition(…, field=…)``), with the function
    it is in; and every use of a name."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.fields: list[tuple[str, str, str]] = []  # (field, function, receiver)
        self.names: list[tuple[str, str]] = []
        self.calls: list[tuple[str, str, str]] = []  # (name, function, whole call's source)
        self.strings: list[tuple[str, str]] = []  # (text of a literal or f-string, function)
        # Names bound to a case event (``event = event_row(…)``), per function.
        self.events: set[tuple[str, str]] = set()
        self.event_saves: list[str] = []  # functions that save such a name or a CaseEvent

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
        for argument in (*node.args.args, *node.args.kwonlyargs):
            if argument.annotation is not None and "CaseEvent" in ast.unparse(argument.annotation):
                self.events.add((argument.arg, node.name))  # an event handed in to be saved
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    @property
    def where(self) -> str:
        return self.functions[-1] if self.functions else "<module>"

    def _target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Attribute):
            self.fields.append((target.attr, self.where, ast.unparse(target.value)))
        elif isinstance(target, ast.Tuple):
            for element in target.elts:
                self._target(element)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target)
            value = node.value
            built = isinstance(value, ast.Call) and _called(value) in EVENT_BUILDERS
            if built and isinstance(target, ast.Name):
                self.events.add((target.id, self.where))
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = _called(node)
        self.calls.append((name, self.where, ast.unparse(node)))
        if name in EVENT_SAVES or name == "CaseEvent":
            touched = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            events = {event for event, where in self.events if where == self.where}
            if name == "CaseEvent" or touched & (events | {"CaseEvent"}):
                self.event_saves.append(self.where)
        if name in WRITE_CALLS:
            receiver = ast.unparse(func)
            for keyword in node.keywords:
                if keyword.arg is not None:
                    self.fields.append((keyword.arg, self.where, receiver))
            # ``cases.rows.update(Model, where, values)``: the values' keys are written.
            if isinstance(func, ast.Name) and len(node.args) == 3:
                model, _, values = node.args
                if isinstance(values, ast.Dict):
                    for key in values.keys:
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            self.fields.append((key.value, self.where, ast.unparse(model)))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.strings.append((node.value, self.where))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self.strings.append((ast.unparse(node), self.where))  # its parts are not visited again

    def visit_Name(self, node: ast.Name) -> None:
        self.names.append((node.id, self.where))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self.names.append((alias.name, self.where))


def _all_writes() -> list[tuple[str, _Writes]]:
    found = []
    for rel, tree in _sources():
        writes = _Writes()
        writes.visit(tree)
        found.append((rel, writes))
    return found


WRITES = _all_writes()


def _writers(fields: set[str], *, receiver_has: str = "") -> set[tuple[str, str]]:
    return {
        (rel, function)
        for rel, writes in WRITES
        for field, function, receiver in writes.fields
        if field in fields and receiver_has in receiver
    }


def test_attempt_state_is_written_only_by_cases_attempts():
    writers = _writers({"state"}, receiver_has="Attempt") | _writers(
        {"state"}, receiver_has="attempt"
    )
    assert {rel for rel, _ in writers} <= {"cases/attempts.py"}, writers
    assert {rel for rel, _ in _writers({"cancel_requested_at"})} == {"cases/attempts.py"}


def test_an_operation_is_confirmed_only_by_operation_confirm():
    writers = _writers({"confirmed_at", "result_order_version"})
    assert writers == {("reconciliation/settle.py", "operation_confirm")}, writers


def test_proposals_are_closed_outside_approvals_only_through_its_public_writers():
    private = {"_close_proposal", "_revoke_approvals"}
    users = {
        rel
        for rel, writes in WRITES
        for name, _ in writes.names
        if name in private and not rel.startswith("approvals/")
    }
    assert users == set()


def test_cancellations_after_the_change_are_marked_only_by_case_complete():
    users = {
        (rel, function)
        for rel, writes in WRITES
        for name, function in writes.names
        if name == "cancellations_mark_after_change"
    }
    assert {rel for rel, _ in users} == {"reconciliation/complete.py"}, users


def test_retry_counters_are_written_only_by_cases_retries():
    writers = _writers({"retry_count", "retry_counts"})
    assert {rel for rel, _ in writers} == {"cases/retries.py"}, writers


# --- lease renewal, case status, audit events, fencing tokens -----------------------------------


def _strings(*patterns: str) -> set[tuple[str, str]]:
    """Where a string literal or f-string contains every one of ``patterns`` (case-insensitive):
    the raw SQL a fast path writes with."""
    return {
        (rel, function)
        for rel, writes in WRITES
        for text, function in writes.strings
        if all(pattern.lower() in text.lower() for pattern in patterns)
    }


def test_a_lease_is_renewed_only_by_reconciliation_leases():
    writers = _writers({"lease_expires_at", "heartbeat_at"})
    raw = _strings("lease_expires_at =") | _strings("heartbeat_at =")
    assert {rel for rel, _ in writers | raw} == {"reconciliation/leases.py"}, writers | raw


def test_a_case_status_is_written_only_by_the_kernel():
    """No field write of a case's status, no call of a status transition on a case and no raw
    UPDATE of the case table's status outside ``cases.kernel``."""
    from cases.models import Case

    transitions = {t.name for t in Case().get_all_status_transitions()}  # type: ignore[attr-defined]
    table = Case._meta.db_table
    direct = {
        (rel, function)
        for rel, writes in WRITES
        for field, function, receiver in writes.fields
        if field == "status" and "case" in receiver.lower().split(".")[0]
    }
    called = {
        (rel, function)
        for rel, writes in WRITES
        for name, function, call in writes.calls
        if name in transitions and call.split(".")[0].lower().endswith("case")
    }
    raw = {
        (rel, function)
        for rel, writes in WRITES
        for text, function in writes.strings
        if re.search(rf'UPDATE\s+"?({table}|{{Case\._meta\.db_table}})"?\s+SET', text, re.I)
    }
    assert {rel for rel, _ in direct | called | raw} <= {"cases/kernel.py"}, direct | called | raw
    assert ("cases/kernel.py", "claim_transition") in called
    assert ("cases/kernel.py", "pg_claim_statement") in raw


def test_an_audit_event_of_a_case_is_saved_only_by_the_kernel():
    """Events are built by ``kernel.event_row`` and saved by the kernel alone: nothing else
    constructs a ``CaseEvent``, saves or inserts one it got from ``event_row`` or through
    ``CaseEvent.objects``, or INSERTs into the events table in raw SQL."""
    from cases.models import CaseEvent

    saves = {(rel, function) for rel, writes in WRITES for function in writes.event_saves}
    raw = _strings("insert into", CaseEvent._meta.db_table) | _strings(
        "insert into", "CaseEvent._meta.db_table"
    )
    assert {rel for rel, _ in saves | raw} == {"cases/kernel.py"}, saves | raw
    assert {"record_event", "event_row", "claim_write"} <= {f for _, f in saves}


def test_fencing_tokens_come_only_from_cases_fencing():
    """Every token is the sequence's next value, taken in ``cases.fencing`` (the claim's read
    embeds its expression, ``next_fencing_token_sql``); the counter row and ``setval`` too."""
    from cases.fencing import FENCING_SEQUENCE

    raw = _strings("nextval") | _strings("setval") | _strings(FENCING_SEQUENCE)
    counter = {
        (rel, function)
        for rel, writes in WRITES
        for name, function, call in writes.calls
        if name in {"counter_next", "counter_raise_to"} and "fencing_token" in call
    }
    assert {rel for rel, _ in raw | counter} == {"cases/fencing.py"}, raw | counter
