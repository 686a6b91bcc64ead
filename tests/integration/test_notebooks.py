"""The notebooks run top to bottom on CPU (fake MNIST, tiny settings), as a user would run them."""

from __future__ import annotations

import pytest

from tests.helpers.paths import REPO_ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300


#: the default tier runs the shortest notebook (a kernel start, lit_gpu's GPU modes on CPU); the others,
#: the quickstart's fit and plots among them, are the full tier's
SAMPLE = ("02_gpu_modes",)


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=() if p.stem in SAMPLE else pytest.mark.full) for p in NOTEBOOKS],
    ids=[p.stem for p in NOTEBOOKS],
)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    monkeypatch.setenv("LIT_GPU_FAKE_MNIST", "1")  # CI has no MNIST: lit_gpu.demo writes its stand-in
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's work dir (runs/, PNGs) lands here
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError with the failing cell and its traceback

    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    texts = [o.get("text", "") for c in notebook.cells for o in c.get("outputs", [])]
    assert not [t for t in texts if "💡 Tip" in t], "Lightning's cloud-service tips reached the notebook"
    images = [o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images or path.stem == "02_gpu_modes", "the curves / confusion matrix were not displayed"
    assert list(tmp_path.glob("lit_gpu_nb_*")), "the notebook did not use a temp work dir"


def test_all_notebooks_are_collected():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_gpu_modes.ipynb",
        "03_research.ipynb",
        "04_sweep.ipynb",
    ]
