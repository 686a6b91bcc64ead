"""Accuracy on the real MNIST (opt-in: `pytest -m slow`; skipped where the files are absent).

Looks for ``$LIT_GPU_DATA_DIR`` or ``../shared/data`` beside the repo (``MNIST/raw/*-ubyte``).
"""

import os
from pathlib import Path

import pytest

from lit_gpu.cli import LitGpuCLI
from lit_gpu.data.mnist import missing_raw_files
from tests.helpers.paths import CONFIGS, REPO_ROOT

DATA_DIR = Path(os.environ.get("LIT_GPU_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing_raw_files(DATA_DIR)), reason=f"real MNIST not found under {DATA_DIR}"),
]


def _fit_and_test(config: str, tmp_path, monkeypatch, ckpt: str) -> float:
    monkeypatch.chdir(tmp_path)
    args = ["--config", str(CONFIGS / config), "--data.data_dir", str(DATA_DIR), "--data.download", "false",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    LitGpuCLI(args=["fit", *args])
    test = LitGpuCLI(args=["test", *args, "--ckpt_path", ckpt, "--trainer.logger", "false"])
    return float(test.trainer.callback_metrics["test/acc"])


def test_mnist_yaml_reaches_99_percent(tmp_path, monkeypatch):
    assert _fit_and_test("mnist.yaml", tmp_path, monkeypatch, ckpt="best") >= 0.99


def test_mnist_fast_yaml_reaches_99_percent(tmp_path, monkeypatch):
    assert _fit_and_test("mnist_fast.yaml", tmp_path, monkeypatch, ckpt="last") >= 0.99
