"""A malformed launcher or SLURM variable is one line and exit 2 at the front door, including the ones
Lightning and torchmetrics read when they are imported; a SLURM job id that is not a number never
reaches Lightning's requeue handler (which can run ``scontrol requeue <id>`` through a shell)."""

from __future__ import annotations

import json
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

    from lit_gpu.errors import LitGpuError
    from lit_gpu.preemption import CheckpointOnInterrupt
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


@pytest.mark.parametrize("visible", ["NoDevFiles", "0,1,"])
def test_a_fit_runs_with_the_devices_cuda_reads(tmp_path, cli_env, visible):
    """slurmd's ``NoDevFiles`` (a CPU job) and the ``tr '\\n' ','`` idiom's trailing comma: accepted, with the
    meaning CUDA gives them (here, on a machine without a GPU, the run goes on the CPU as asked)."""
    from tests.helpers.forked_cli import run_cli

    done = run_cli(FIT, tmp_path, {**cli_env, "CUDA_VISIBLE_DEVICES": visible}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and list((tmp_path / "runs").rglob("last.ckpt"))


def test_diagnostics_report_a_bad_variable_instead_of_refusing(tmp_path):
    """``lit-gpu env`` shows every bad launcher variable in its advice, ``fit --help`` warns and prints its
    help, ``--version`` answers: none of them runs anything the variable would break."""
    bad = {"RANK": "abc", "CUDA_VISIBLE_DEVICES": "NoDevFiles"}
    env = _lit_gpu(["env", "--json"], tmp_path, **bad)
    assert env.returncode == 0, env.stderr[-2000:]
    advice = "\n".join(json.loads(env.stdout)["advice"])
    assert "environment variable RANK='abc': a whole number >= 0" in advice
    helped = _lit_gpu(["fit", "--help"], tmp_path, **bad)
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert "--trainer" in helped.stdout and "Traceback" not in helped.stderr
    assert helped.stderr.strip().splitlines() == [
        "lit-gpu: warning: environment variable RANK='abc': a whole number >= 0, e.g. RANK=0; "
        "fix or unset it (set by you or the launcher); left out for this --help"
    ]
    version = _lit_gpu(["--version"], tmp_path, **bad)
    assert version.returncode == 0 and version.stdout.startswith("lit-gpu ")
