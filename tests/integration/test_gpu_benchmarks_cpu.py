"""Issue 42's GPU benchmarks run end to end on a CPU at tiny sizes: they cannot rot between GPU sessions."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.fake_mnist import make_fake_mnist
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def _run(*args: str, cwd=REPO_ROOT) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_resnet_benchmark_times_its_contestants_on_cpu():
    """The naive loop and lit_gpu's fit (the tuned loop differs in flags only; bf16 on a CPU is slow)."""
    out = _run(
        "benchmarks/resnet_gpu.py", "--device", "cpu", "--steps", "1", "--warmup", "1",
        "--batch-size", "2", "--num-samples", "16", "--workers", "1", "--repeats", "1",
        "--only", "naive", "lit_gpu",
    )  # fmt: skip
    for name in ("naive", "lit_gpu"):
        assert f"| {name} |" in out
    assert "load average before" in out


def test_the_warmup_benchmark_reports_each_process(tmp_path):
    make_fake_mnist(tmp_path)
    out = _run(
        "benchmarks/warmup.py", "--config", str(REPO_ROOT / "configs" / "mnist_gpu_graph.yaml"),
        "--data-dir", str(tmp_path), "--device", "cpu", "--steps", "2", "--processes", "1", "--",
        "--data.val_size", "100", "--data.batch_size", "50", "--trainer.max_steps", "6",
        "--model.scheduler.init_args.total_steps", "6",
    )  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| mnist_gpu_graph.yaml |")]
    assert len(rows) == 1 and "failed" not in out
