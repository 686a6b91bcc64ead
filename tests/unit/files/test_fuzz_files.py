"""Mutated copies of the files lit_gpu writes never end in a traceback, a hang or memory past the budget.

Short mode (in the suite): 2 000 mutated files read in-process the way lit_gpu reads them
(:mod:`tests.helpers.fuzz_files`); the CLI runs on mutated files are in
``tests/integration/test_files_are_data.py``. Long mode: ``pytest -m slow`` (20 000 files), or
``python -m tests.helpers.fuzz_files 20000``.
"""

from __future__ import annotations

import pytest

from tests.helpers.fuzz_files import MEMORY_BUDGET, fuzz

SHORT, LONG = 2_000, 20_000


def _check(tally, n: int) -> None:
    assert tally.files == n
    assert tally.failures == [], "\n".join(tally.failures[:10])
    assert tally.rss_growth < MEMORY_BUDGET
    assert tally.read_ok > 0 and tally.one_line_errors > 0  # the mutations reach both outcomes
    assert len(tally.per_target) >= 10  # every kind of file was fuzzed


def test_fuzz_short(tmp_path):
    _check(fuzz(SHORT, seed=20261127, folder=tmp_path), SHORT)


@pytest.mark.slow
def test_fuzz_long(tmp_path):
    _check(fuzz(LONG, seed=38, folder=tmp_path), LONG)


@pytest.mark.slow
def test_fuzz_with_checkpoints(tmp_path):
    tally = fuzz(SHORT, seed=5, checkpoint=True, folder=tmp_path)
    assert tally.failures == [], "\n".join(tally.failures[:10])
