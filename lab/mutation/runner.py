"""Run the catalogue: copy the tree once into a temporary directory (the working tree is never
edited), then for each mutation write the mutated file into the copy, run its tests there on
SQLite and put the original back. A mutation is *killed* when its tests fail (pytest exit 1),
*survived* when they pass; anything else (no tests collected, an import error, a timeout) is
an *error*. Exit status: 0 only when every mutation was killed."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.mutation.catalogue import MUTATIONS
from lab.mutation.model import Mutation

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 600
# git from PATH, as the developer's shell finds it.
GIT_LS_FILES = [
    "git",
    "ls-files",
    "-z",
    "--cached",
    "--others",
    "--exclude-standard",
]  # seconds per mutation's tests


def copy_tree(root: Path, target: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, as they are now."""
    listed = subprocess.run(  # noqa: S603 - git, fixed arguments
        GIT_LS_FILES,
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = root / rel
        if not source.is_file():
            continue  # deleted in the working tree
        destination = target / rel
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    (target / "var").mkdir(exist_ok=True)
    venv = root / ".venv"
    if venv.exists():
        (target / ".venv").symlink_to(venv.resolve())


def test_environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"sqlite:///{tree}/var/mutate.sqlite3",
        TEST_DATABASE_URL="",
        DJANGO_ENV="test",
        # A mutated file and its original may share size and mtime: never trust a cached .pyc.
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("PYTEST_ADDOPTS", None)
    return env


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:schemathesis", *tests]
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter and the catalogue's tests
            command,
            cwd=tree,
            env=test_environment(tree),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def verdict(returncode: int) -> str:
    if returncode == 1:
        return "killed"
    if returncode == 0:
        return "survived"
    return "error"


def run(mutations: list[Mutation], *, baseline: bool, verbose: bool) -> int:
    problems = [p for m in mutations for p in m.problems(ROOT)]
    if problems:
        print("The catalogue does not fit the tree:", *problems, sep="\n  ")
        return 2
    started = time.monotonic()
    counts = {"killed": 0, "survived": 0, "error": 0}
    with tempfile.TemporaryDirectory(prefix="holdfast-mutate-") as tmp:
        tree = Path(tmp)
        copy_tree(ROOT, tree)
        if baseline:
            tests = tuple(sorted({t for m in mutations for t in m.tests}))
            code, last = run_tests(tree, tests)
            print(f"baseline (no mutation): {'green' if code == 0 else 'RED'} -- {last}")
            if code != 0:
                return 2
        width = max(len(m.name) for m in mutations)
        for index, mutation in enumerate(mutations, start=1):
            file = tree / mutation.path
            original = file.read_text()
            file.write_text(mutation.mutated(original))
            t0 = time.monotonic()
            try:
                code, last = run_tests(tree, mutation.tests)
            finally:
                file.write_text(original)
            result = verdict(code)
            counts[result] += 1
            note = f" -- {last}" if verbose or result != "killed" else ""
            print(
                f"[{index:>2}/{len(mutations)}] {mutation.name:<{width}} {result:<8} "
                f"({time.monotonic() - t0:4.1f} s){note}",
                flush=True,
            )
    total = len(mutations)
    print(
        f"{counts['killed']} of {total} killed, {counts['survived']} survived, "
        f"{counts['error']} errors ({time.monotonic() - started:.0f} s)"
    )
    return 0 if counts["killed"] == total else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.mutation",
        description="Apply each curated mutation of the safety core to a copy of the tree and "
        "run the tests that name its code: every mutation must be killed.",
    )
    parser.add_argument("names", nargs="*", help="only these mutations (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument(
        "--baseline", action="store_true", help="first run every named test unmutated"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="pytest's last line always")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    if args.list:
        for mutation in chosen:
            print(f"{mutation.name}: {mutation.path} -- {mutation.why}")
        return 0
    return run(chosen, baseline=args.baseline, verbose=args.verbose)
