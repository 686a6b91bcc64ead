"""A malformed launcher or SLURM variable is one line and exit 2 at the front door, including the ones
Lightning and torchmetrics read when they are imported; a SLURM job id that is not a number never
reaches Lightning's requeue handler (which can run ``scontrol requeue <id>`` through a shell)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import CONFIGS, REPO_ROOT

FIT = ["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


def _lit_gpu(args: list[str], tmp_path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    environ.update(env, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "lit_gpu", *args],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LOCAL_RANK", "abc"),  # read by Lightning on import (rank_zero_only.rank)
        ("SLURM_PROCID", "abc"),  # read by Lightning on import too
        ("RANK", "abc"),
        ("SLURM_NTASKS", "abc"),
        ("WORLD_SIZE", "two"),
        ("MASTER_PORT", "port"),
        ("SLURM_JOB_ID", "1; touch pwned"),
    ],
)
def test_a_malformed_variable_is_one_line_and_exit_2(tmp_path, name, value):
    done = _lit_gpu(FIT, tmp_path, **{name: value})
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lit-gpu: error: environment variable {name}=")
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()
    assert not (tmp_path / "pwned").exists()


def test_commands_that_import_no_torch_do_not_check(tmp_path):
    done = _lit_gpu(["configs"], tmp_path, RANK="abc")
    assert done.returncode == 0, done.stderr


def test_a_fit_from_python_with_an_unsafe_job_id_stops_before_the_requeue_handler(tmp_path, monkeypatch):
    """``LitGpuCLI``/``Trainer`` from Python (no front door): CheckpointOnInterrupt refuses the id in
    ``setup``, before Lightning registers its SIGUSR1 requeue handler."""
    import signal

    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    from lit_gpu.callbacks.interrupt import CheckpointOnInterrupt
    from lit_gpu.errors import LitGpuError
    from tests.helpers.trainers import quiet_trainer

    slurm = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    for name, value in {**slurm, "SLURM_NODEID": "0", "SLURM_JOB_ID": "7 && touch pwned"}.items():
        monkeypatch.setenv(name, value)  # a SLURM job as Lightning detects it (it would requeue)
    monkeypatch.chdir(tmp_path)
    before = signal.getsignal(signal.SIGUSR1)
    trainer = quiet_trainer(tmp_path, max_steps=1, callbacks=[CheckpointOnInterrupt()])
    with pytest.raises(LitGpuError, match="SLURM_JOB_ID"):
        trainer.fit(BoringModel())
    assert signal.getsignal(signal.SIGUSR1) == before
    assert isinstance(trainer, pl.Trainer) and not (tmp_path / "pwned").exists()
