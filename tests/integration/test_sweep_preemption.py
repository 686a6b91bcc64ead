"""Sweeps survive preemption: a trial stopped by SIGTERM, SIGINT or SIGKILL goes on from its ``last.ckpt``.

Every trial here has the same parameters (a one-choice space) on configs/simple.yaml + debug.yaml for 3
epochs of 4 steps, so an uninterrupted trial of the same study is the reference: the continued trial
must reach its values exactly, and report each validation to Optuna once.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
import torch
from optuna.trial import TrialState

from lit_gpu.commands import sweep as sweep_cmd
from tests.helpers.forked_cli import ForkedRun, popen
from tests.helpers.paths import CONFIGS
from tests.helpers.robustness import HOLD_ENV

BASE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
LR = "model.init_args.optimizer.init_args.lr"
EPOCHS = ["--trainer.max_epochs", "3"]  # 12 steps, a validation (and last.ckpt) every 4


def slow(seconds: float) -> list[str]:
    return [
        "--trainer.callbacks+=tests.helpers.robustness.SlowSteps",
        "--trainer.callbacks.seconds",
        str(seconds),
    ]


def fixed_space(folder: Path) -> str:
    path = folder / "fixed.yaml"
    path.write_text(f"{LR}: {{type: categorical, choices: [0.05]}}\n")
    return str(path)


def load(sweep_dir: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=sweep_cmd.make_storage(None, sweep_dir))


def start_worker(argv: list[str], cwd: Path, env: dict[str, str], step: int) -> ForkedRun:
    """A sweep worker in its own process group; returns once its trial reached training step ``step``
    where it waits for the test's signal (``HOLD_ENV``): the signal lands at ``step``."""
    held = {**env, HOLD_ENV: str(step)}
    proc = popen(["sweep", *argv], cwd, held, stdout=subprocess.DEVNULL)  # forked: helpers/forked_cli.py
    progress = cwd / "progress.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and int(progress.read_text() or 0) >= step:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the worker did not reach step {step}: {proc.communicate()[1].decode()[-3000:]}")


def steps_in_csv(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]


@pytest.mark.parametrize(
    "sig",  # SIGTERM is the default tier's sample; SIGINT and SIGKILL the full tier's
    [signal.SIGTERM, *(pytest.param(s, marks=pytest.mark.full) for s in (signal.SIGINT, signal.SIGKILL))],
    ids=["SIGTERM", "SIGINT", "SIGKILL"],
)
def test_a_stopped_trial_is_continued_from_its_checkpoint_to_the_uninterrupted_value(
    sig, tmp_path, monkeypatch, cli_env, capsys
):
    space = fixed_space(tmp_path)
    argv = [*BASE, "--search", space, *EPOCHS, "--pruner", "none"]
    worker = start_worker([*argv, "--n_trials", "1", *slow(0)], tmp_path, cli_env, step=6)
    os.killpg(worker.pid, sig)
    _, err = worker.communicate(timeout=60)
    err = err.decode()
    sweep_dir = tmp_path / "runs/sweeps/fixed"
    [stopped] = load(sweep_dir, "fixed").get_trials()
    assert stopped.state == TrialState.RUNNING  # not failed: its work is kept for the next invocation
    if sig != signal.SIGKILL:
        assert worker.returncode == 128 + sig, err[-3000:]
        assert "trial 0 stopped with its last.ckpt" in err
        assert sorted(stopped.intermediate_values) == [0]  # validation after step 4 reported
    else:
        assert worker.returncode == -signal.SIGKILL
    last = sweep_dir / "version_0/checkpoints/last.ckpt"
    saved_step = torch.load(last, weights_only=True)["global_step"]
    # SIGTERM/SIGINT: saved at the step it waited at (6); SIGKILL: the epoch-end save at step 4 stays
    assert saved_step == (6 if sig != signal.SIGKILL else 4), saved_step

    # the same command again (a requeued job), asking for 2 finished trials: trial 0 is continued,
    # then trial 1 runs uninterrupted with the same parameters
    monkeypatch.chdir(tmp_path)
    record = ["--trainer.callbacks+=tests.helpers.robustness.RecordStartStep"]
    assert sweep_cmd.main([*argv, "--until_complete", "2", *slow(0), *record]) == 0
    err = capsys.readouterr().err
    # trial 0 trained on from its checkpoint's step, not from 0; trial 1 from the start
    assert (tmp_path / "start_steps.txt").read_text().split() == [str(saved_step), "0"], err[-6000:]
    why = "stopped by a signal" if sig != signal.SIGKILL else "its worker (pid"
    assert f"trial 0: continuing ({why}" in err and "version_0/checkpoints/last.ckpt" in err
    continued, reference = load(sweep_dir, "fixed").get_trials()
    assert continued.state == reference.state == TrialState.COMPLETE
    assert continued.user_attrs["resumed"] == 1 and "resumed" not in reference.user_attrs
    assert continued.params == reference.params
    assert continued.value == reference.value  # exact resume: the very same final val/loss
    assert continued.intermediate_values == reference.intermediate_values  # each validation once
    assert sorted(continued.intermediate_values) == [0, 1, 2]
    assert steps_in_csv(sweep_dir / "version_0") == steps_in_csv(
        sweep_dir / "version_1"
    )  # one log, no repeats

    # the target is reached: the same command again runs nothing more
    assert sweep_cmd.main([*argv, "--until_complete", "2", *slow(0)]) == 0
    assert len(load(sweep_dir, "fixed").get_trials()) == 2
