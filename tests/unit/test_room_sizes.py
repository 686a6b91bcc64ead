"""Rooms of one concern: no module of lit_gpu is over 400 lines (issue 48).

Generated tables are not rooms. A module that grows over the limit is split where it holds two concerns.
"""

from __future__ import annotations

from tests.helpers.paths import REPO_ROOT

LIMIT = 400
#: generated from the parser (python -m lit_gpu.cli.completion), not written by hand
GENERATED = {"lit_gpu/cli/completion_flags.py"}


def _lines(module: str) -> int:
    return len((REPO_ROOT / module).read_text().splitlines())


def test_no_room_of_lit_gpu_is_over_the_limit():
    modules = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "lit_gpu").rglob("*.py"))
    over = [f"{m}: {_lines(m)} lines" for m in modules if m not in GENERATED and _lines(m) > LIMIT]
    assert over == []
