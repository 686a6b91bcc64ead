"""Committed notebooks are valid and stripped: no outputs, no execution counts, a plain python3 kernel."""

from __future__ import annotations

import pytest

from tests.helpers.paths import REPO_ROOT

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))


def test_expected_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"01_quickstart.ipynb", "02_gpu_modes.ipynb", "03_research.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_valid_and_stripped(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.get("kernelspec", {}).get("name") == "python3"
    assert "widgets" not in notebook.metadata
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code, "no code cells"
    for i, cell in enumerate(code):
        assert cell.get("outputs") == [], f"code cell {i} has outputs: strip them before committing"
        assert cell.get("execution_count") is None, f"code cell {i} has an execution count"
        assert "execution" not in cell.get("metadata", {}), f"code cell {i} has execution timing metadata"
