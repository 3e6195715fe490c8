"""One mutation: an exact edit of one source file and the tests that must notice it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutation:
    """Replace ``original`` (which occurs exactly once in ``path``) by ``replacement``; the
    tests in ``tests`` (pytest node ids or files, run on SQLite) must then fail.

    ``name`` is short and unique; ``why`` says which rule the edit breaks."""

    name: str
    path: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    why: str

    def problems(self, root: Path) -> list[str]:
        """What makes this mutation unusable against the tree at ``root`` (none: well-formed)."""
        file = root / self.path
        if not file.is_file():
            return [f"{self.name}: {self.path} does not exist"]
        found = file.read_text().count(self.original)
        problems = []
        if found != 1:
            problems.append(f"{self.name}: the original text occurs {found} times in {self.path}")
        if self.original == self.replacement:
            problems.append(f"{self.name}: the replacement changes nothing")
        if not self.tests:
            problems.append(f"{self.name}: no tests named")
        for test in self.tests:
            if not (root / test.split("::")[0]).is_file():
                problems.append(f"{self.name}: test file {test} does not exist")
        return problems

    def mutated(self, text: str) -> str:
        return text.replace(self.original, self.replacement, 1)
