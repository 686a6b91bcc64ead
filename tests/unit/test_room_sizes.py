"""The house's size: a line budget per package (one per guarantee), a total, and few entries at the top.

Not a cap per file: a file is never split for size. Functions stay short through ruff (``C901``,
``PLR0915`` in pyproject.toml). A package is ``lit_gpu/NAME/`` or ``lit_gpu/NAME.py``; its lines are all
its ``.py`` files' lines. Budgets are the design's targets (issue 63); the product packages' (modules, nets,
data, strategies, demo) are their size at the redesign + 10 %. A package not (yet) present counts 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "lit_gpu"

#: package (a folder or a module at the top of lit_gpu/) -> most lines
BUDGETS: dict[str, int] = {
    "checkpoints": 3_300,
    "resume": 1_550,
    "preemption": 450,
    "run": 2_300,
    "devices": 750,
    "oom": 800,
    "callbacks": 1_600,
    "cli": 1_450,
    "commands": 3_100,
    "textfiles": 450,
    "fastpath": 2_000,
    "upstream": 400,
    "messages": 350,
    "explain": 350,
    "errors": 20,
    "__init__": 50,
    "__main__": 10,
    # the product: its size at the redesign + 10 % (data: images, mnist, synthetic + the IDX reader)
    "modules": 465,
    "nets": 225,
    "data": 790,
    "strategies": 335,
    "demo": 120,
}
TOTAL_LINES = 21_000
TOTAL_FILES = 90
TOP_ENTRIES = 22

#: packages over their budget after the moves of issue 63 (lines on 2026-12-07): the cut that remains; an
#: entry goes when its package is within budget
OVER_BUDGET = {
    "checkpoints": 4_107,
    "resume": 2_153,
    "preemption": 519,
    "run": 2_775,
    "callbacks": 1_661,
    "cli": 2_179,
    "commands": 3_685,
    "upstream": 1_124,
    "messages": 393,
    "explain": 429,
}
_OVER = "issue 63 (open): the package is over its budget; the line cut remains"


def _files(name: str) -> list[Path]:
    folder, module = PACKAGE / name, PACKAGE / f"{name}.py"
    if folder.is_dir() and any(folder.rglob("*.py")):
        return sorted(folder.rglob("*.py"))
    return [module] if module.is_file() else []  # a folder left with caches only is no package


def _lines(paths: list[Path]) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


def _entries() -> list[str]:
    """The top of lit_gpu/: its folders and modules (caches and data folders without code left out)."""
    return sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.name != "__pycache__" and (p.suffix == ".py" or (p.is_dir() and any(p.rglob("*.py"))))
    )


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=False, reason=_OVER)) if n in OVER_BUDGET else n
        for n in BUDGETS
    ],
)
def test_each_package_is_within_its_budget(name):
    lines = _lines(_files(name))
    assert lines <= BUDGETS[name], f"lit_gpu/{name}: {lines} lines, budget {BUDGETS[name]}"


def test_every_entry_at_the_top_has_a_budget():
    unbudgeted = [e for e in _entries() if e.removesuffix(".py") not in BUDGETS]
    assert unbudgeted == []


def test_few_files():
    assert len(sorted(PACKAGE.rglob("*.py"))) <= TOTAL_FILES


@pytest.mark.xfail(strict=False, reason=_OVER)
def test_the_whole_package_is_within_its_total():
    assert _lines(sorted(PACKAGE.rglob("*.py"))) <= TOTAL_LINES


def test_few_entries_at_the_top():
    assert len(_entries()) <= TOP_ENTRIES, _entries()


def test_the_budgets_measure_something():
    """The scan sees the tree: the packages present are counted (not all 0)."""
    assert _lines(_files("modules")) > 0 and _lines(_files("callbacks")) > 0
