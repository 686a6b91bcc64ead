"""``devices: free:N`` on real GPUs: the run's log and config.yaml name the GPUs each rank used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lit_gpu import devices
from tests.helpers.paths import CONFIGS, REPO_ROOT
from tests.helpers.run_if import RunIf

LIT_GPU = str(Path(sys.executable).with_name("lit-gpu"))
SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


@pytest.fixture
def gpu_env(cli_env: dict[str, str]) -> dict[str, str]:
    """``cli_env`` with the machine's own GPU visibility (``cli_env`` hides every GPU)."""
    env = dict(cli_env)
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    else:
        del env["CUDA_VISIBLE_DEVICES"]
    env.pop(devices.FREE_CHOICE_ENV, None)
    return env


def _saved_record(run_root: Path) -> list[dict]:
    (config,) = run_root.glob("runs/lit_gpu/version_*/config.yaml")
    return yaml.safe_load(config.read_text())["free_gpus"]


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_fit_free_1_records_the_physical_gpu(tmp_path, gpu_env):
    args = [LIT_GPU, "fit", *SIMPLE, "--trainer.accelerator", "gpu", "--trainer.devices", "free:1"]
    proc = subprocess.run(args, cwd=tmp_path, env=gpu_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (record,) = _saved_record(tmp_path)
    physical = {g.index: g.uuid for g in devices.query_gpus()}
    assert record["local_rank"] == 0 and physical[record["index"]] == record["uuid"]
    assert f"local rank 0 -> GPU {record['index']} {record['name']} ({record['uuid']})" in proc.stderr


@pytest.mark.gpu
@RunIf(min_cuda_gpus=2)
def test_ddp_free_2_puts_each_rank_on_its_recorded_gpu(tmp_path, gpu_env):
    script = REPO_ROOT / "tests/helpers/free_gpu_fit.py"
    args = [
        sys.executable, str(script), str(tmp_path), "fit", *SIMPLE,
        "--config", str(CONFIGS / "trainer/ddp.yaml"), "--trainer.accelerator", "gpu",
        "--trainer.devices", "free:2",
    ]  # fmt: skip
    proc = subprocess.run(args, cwd=tmp_path, env=gpu_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    record = _saved_record(tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["uuid"] for r in ranks] == [g["uuid"] for g in record]  # rank r on the GPU recorded for it
    assert len({r["uuid"] for r in ranks}) == 2
    assert proc.stderr.count("free:2 chose") == 1  # one decision, logged once by the launching process
