"""Issues 42 and 52's GPU benchmarks run end to end on a CPU at tiny sizes: they cannot rot unseen.

Each starts a fresh interpreter that builds ResNets or trains (~25 s of CPU apiece): ``full`` (CI runs them,
``pytest`` leaves them out); the stages of issue 52 (~6 min) are an opt-in ``slow`` long mode.
"""

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


@pytest.mark.full
def test_the_resnet_benchmark_times_its_contestants_on_cpu():
    """The eager contestants run; the capture and compile ones are skipped on a CPU, each with its reason."""
    out = _run(
        "benchmarks/resnet_gpu.py", "--device", "cpu", "--steps", "1", "--warmup", "1",
        "--batch-size", "2", "--num-samples", "16", "--workers", "1", "--repeats", "1",
    )  # fmt: skip
    for name in ("tuned", "lit_gpu_eager"):
        assert f"| {name} | " in out and f"# round 0: {name}: " in out
    for name in ("hand_graph", "lit_gpu", "compile"):
        assert f"| {name} | skipped: " in out
    assert "goal (lit_gpu_eager >= 0.97x tuned)" in out and "load average before" in out


@pytest.mark.full
def test_the_image_loader_benchmark_compares_its_contestants_on_cpu():
    """Every data path runs to a float batch on the host (``--device cpu``) and the table compares them."""
    out = _run(
        "benchmarks/image_loader.py", "--device", "cpu", "--image-size", "16", "--batch-size", "4",
        "--workers", "1", "--batches", "2", "--warmup", "1", "--repeats", "1",
    )  # fmt: skip
    for name in ("lit_gpu", "tv_float", "tv_uint8"):
        assert f"# round 0: {name}: " in out and f"| {name} | " in out
    assert "| lit_gpu | " in out and "1.00x |" in out and "load average before" in out


@pytest.mark.slow
def test_issue_52s_stages_run_in_one_process_on_cpu(tmp_path):
    """benchmarks/gpu_stages.py --tiny: the glue profile, ResNet-50 and ResNet-18 stages, a file each."""
    out = _run("benchmarks/gpu_stages.py", "--out", str(tmp_path), "--tiny")
    assert "failed: none" in out
    glue = (tmp_path / "glue.txt").read_text()
    assert "| Lightning | 0.000 | " in glue  # the tuned loop runs no Lightning code; lit_gpu_eager does
    assert "C calls made by Lightning, lit_gpu, torchmetrics code" in glue
    r50 = (tmp_path / "resnet50.txt").read_text()
    assert "GFLOP per image per training step" in r50 and "the loader alone: " in r50
    assert "| tuned | " in r50 and "| lit_gpu_eager | " in r50 and "| lit_gpu | skipped: " in r50
    r18 = (tmp_path / "resnet18.txt").read_text()
    assert "| compile | skipped: " in r18 and "| hand_graph | skipped: " in r18


@pytest.mark.full
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
