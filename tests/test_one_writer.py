"""One writer per rule, checked on the source: each rule's fields are written in one place.

- ``Attempt.state`` (and ``cancel_requested_at``): ``cases.attempts`` only;
- an operation's confirmation (``confirmed_at``, ``result_order_version``):
  ``reconciliation.settle.operation_confirm`` only;
- closing a proposal and revoking its approvals: the public ``approvals.services`` writers
  (``proposal_withdraw``, …); nothing outside ``approvals`` uses the private helpers;
- marking cancellations that arrived after the change: ``reconciliation.complete.case_complete``;
- the retry counters (``retry_count``, ``retry_counts``): ``cases.retries`` only.
"""

from __future__ import annotations

import ast
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


class _Writes(ast.NodeVisitor):
    """Every write of a field: ``x.field = …``, ``x.field += …``, ``….update(field=…)`` and
    keyword arguments of writer calls (``apply_transition(…, field=…)``), with the function
    it is in; and every use of a name."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.fields: list[tuple[str, str, str]] = []  # (field, function, receiver)
        self.names: list[tuple[str, str]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
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
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in WRITE_CALLS:
            receiver = ast.unparse(func)
            for keyword in node.keywords:
                if keyword.arg is not None:
                    self.fields.append((keyword.arg, self.where, receiver))
        self.generic_visit(node)

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
