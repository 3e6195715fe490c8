"""The mutation catalogue (``make mutate``) stays in step with the code: every mutation's
original text occurs exactly once in its file, its replacement changes it, the mutated file
still parses, its tests exist, and names are unique. A refactoring that moves a line the list
names fails here, not silently in a run that nobody made."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from lab.mutation.catalogue import MUTATIONS

ROOT = Path(__file__).resolve().parents[2]
# The safety core the list must cover, by the file each rule lives in.
CORE = {
    "reconciliation/claims.py",
    "cases/fencing.py",
    "reconciliation/apply.py",
    "approvals/services.py",
    "reconciliation/settle.py",
    "reconciliation/restore_detection.py",
    "reconciliation/restore_recovery.py",
    "reconciliation/revocation.py",
    "cases/kernel.py",
    "cases/audit.py",
}


def test_every_mutation_fits_the_tree_exactly_once():
    problems = [problem for mutation in MUTATIONS for problem in mutation.problems(ROOT)]
    assert problems == []


def test_every_mutated_file_still_parses():
    """A mutation that breaks the syntax would be killed by any test: it would prove nothing."""
    for mutation in MUTATIONS:
        source = (ROOT / mutation.path).read_text()
        ast.parse(mutation.mutated(source), filename=f"{mutation.path} ({mutation.name})")


def test_at_least_thirty_uniquely_named_mutations_cover_the_safety_core():
    names = Counter(mutation.name for mutation in MUTATIONS)
    assert [name for name, count in names.items() if count > 1] == []
    assert len(MUTATIONS) >= 30
    assert {mutation.path for mutation in MUTATIONS} >= CORE
