"""Architecture rules that import-linter does not express, checked on the source itself.

A name that starts with a single underscore is private to the module that defines it: no other
module imports it (``from x import _y``). What another module needs is made public in the
owning module, under a name that says what it does, so every cross-module use is part of that
module's stated interface and can be found and kept.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cases", "approvals", "reconciliation", "config", "orders", "lab")


def _modules() -> list[Path]:
    """Every non-test, non-migration module of the project's packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "migrations" in parts or "tests" in parts or path.name.startswith("test_"):
                continue
            found.append(path)
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(source: str, label: str) -> list[str]:
    """``from x import _y`` statements of one module's source (at any depth: imports inside
    functions count too), as ``label:line: statement``."""
    tree = ast.parse(source, filename=label)
    return [
        f"{label}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if _is_private(alias.name)
    ]


def test_the_scan_sees_the_packages():
    modules = _modules()
    assert any(p.name == "kernel.py" for p in modules)
    assert not any("migrations" in p.parts for p in modules)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from cases.services import _require\n", 1),
        ("def f():\n    from a.b import public, _private\n", 1),
        ("from . import _helper\n", 1),
        ("from cases.services import __all__, record_event\n", 0),
        ("import cases._private\n", 0),
    ],
)
def test_private_imports_are_found(source, found):
    assert len(private_imports(source, "probe.py")) == found


def test_no_module_imports_another_modules_private_names():
    violations = [
        line
        for path in _modules()
        for line in private_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not violations, (
        "These modules import another module's private (underscored) names; make the name "
        "public in the owning module or move the logic there:\n" + "\n".join(violations)
    )


# The work path's apps: no function or method in them may be of radon's rank D or worse.
WORK_PATH = ("cases", "approvals", "reconciliation")


def test_no_function_of_the_work_path_is_of_radon_rank_d_or_worse():
    """``radon cc -n D cases approvals reconciliation`` prints nothing: every function, method
    and class of the work path stays below cyclomatic complexity 21 (rank D starts there), so
    each one can be read and tested whole."""
    from radon.complexity import cc_rank, cc_visit

    too_complex = []
    for package in WORK_PATH:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.relative_to(ROOT).parts:
                continue
            for block in cc_visit(path.read_text()):
                if cc_rank(block.complexity) >= "D":
                    where = f"{path.relative_to(ROOT)}:{block.lineno}"
                    too_complex.append(f"{where} {block.name} {block.complexity}")
    assert too_complex == []
