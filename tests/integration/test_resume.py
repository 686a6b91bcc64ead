"""Kill -9 a fit mid-epoch, resume with --ckpt_path last: the final weights equal an uninterrupted run."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import torch

from tests.helpers.forked_cli import popen, run_cli
from tests.helpers.paths import CONFIGS
from tests.helpers.robustness import HOLD_ENV

# 4 steps per epoch, 4 epochs, shuffled data, SGD with momentum, deterministic algorithms.
BASE = [
    "fit",
    "--config", str(CONFIGS / "simple.yaml"),
    "--config", str(CONFIGS / "debug.yaml"),
    "--trainer.max_epochs", "4",
    "--trainer.deterministic", "true",
]  # fmt: skip
SLOW = ["--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0"]


def _fit(cwd: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    return run_cli([*BASE, *extra], cwd, env, timeout=240)  # forked: tests/helpers/forked_cli.py


def _ckpt(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path, cli_env):
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    killed.mkdir()
    reference.mkdir()

    # the uninterrupted reference run goes alongside
    ref = popen(BASE, reference, cli_env, stdout=subprocess.DEVNULL, text=True)
    held = {**cli_env, HOLD_ENV: "6"}  # waits at step 6 (epoch 1 under way, epoch 0 saved) for its kill
    proc = popen([*BASE, *SLOW], killed, held, stdout=subprocess.DEVNULL, text=True)
    last = killed / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    progress = killed / "progress.txt"
    deadline = time.monotonic() + 180
    step = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            step = int(progress.read_text()) if progress.exists() else 0
            if step >= 6:  # held there
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.communicate()[1]
    assert step == 6, "the kill must land mid-epoch"
    # the kill left a complete, loadable last.ckpt (atomic writes), from the end of epoch 0
    assert _ckpt(last.parent.parent)["global_step"] == 4

    resumed = _fit(killed, cli_env, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from runs/lit_gpu/version_0/checkpoints/last.ckpt" in resumed.stderr

    _, ref_err = ref.communicate(timeout=240)
    assert ref.returncode == 0, ref_err[-3000:]

    assert "lit-gpu: continuing the run in runs/lit_gpu/version_0 from step 4" in resumed.stderr
    got = _ckpt(killed / "runs" / "lit_gpu" / "version_0")  # the resume went on in the run's folder
    want = _ckpt(reference / "runs" / "lit_gpu" / "version_0")
    assert got["global_step"] == want["global_step"] == 16
    assert got["state_dict"].keys() == want["state_dict"].keys()
    for key in want["state_dict"]:
        assert torch.equal(got["state_dict"][key], want["state_dict"][key]), key
    momentum = [s["momentum_buffer"] for s in want["optimizer_states"][0]["state"].values()]
    got_momentum = [s["momentum_buffer"] for s in got["optimizer_states"][0]["state"].values()]
    assert all(torch.equal(a, b) for a, b in zip(got_momentum, momentum, strict=True))
