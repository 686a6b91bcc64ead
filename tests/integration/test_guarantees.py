"""lit_gpu's guarantees whatever ``trainer.callbacks`` holds: a LightningCLI project's config, its own list.

The config lists Lightning's callbacks (``EarlyStopping``, ``RichModelSummary``) and a user's own
(``tests.helpers.user_callbacks.WaitForSigterm``), which replaces the default list. A SIGTERM to the job
mid-epoch gives what it gives with the default config: ``last.ckpt`` at the step reached, one line, exit 143.
The signal lands by construction: the user's callback waits at step :data:`STEP` until it arrives.
``LIT_GPU_GUARANTEES=false`` gives Lightning's behaviour (its "Received SIGTERM", exit 0, nothing saved).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch

from lit_gpu.callbacks.guarantees import SWITCH
from lit_gpu.preemption import SIGTERM_EXIT_CODE
from tests.helpers.forked_cli import ForkedRun, popen
from tests.helpers.paths import CONFIGS

RUN = Path("runs") / "lit_gpu"
STEP = 3  # the step the user's callback waits at for the signal
BATCHES = 8  # training batches of the (only) epoch: the stop is mid-epoch
WAIT = "tests.helpers.user_callbacks.WaitForSigterm"

#: a LightningCLI project's config: its own trainer.callbacks, Lightning's and its own
OWN_LIST = f"""\
trainer:
  enable_model_summary: true
  callbacks:
  - class_path: lightning.pytorch.callbacks.EarlyStopping
    init_args: {{monitor: val/loss, patience: 3}}
  - class_path: lightning.pytorch.callbacks.RichModelSummary
  - class_path: {WAIT}
    init_args: {{step: {STEP}}}
"""
#: the same list, a guarantee's class included: the user's subclass instance takes lit_gpu's place
WITH_MY_STOP = OWN_LIST + "  - class_path: tests.helpers.user_callbacks.MyCheckpointOnInterrupt\n"


def _argv(tmp_path: Path, config: str | None) -> list[str]:
    argv = ["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    argv += ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", str(BATCHES)]
    if config is None:  # the default config: lit_gpu's list, the waiting callback appended
        return [*argv, f"--trainer.callbacks+={WAIT}", "--trainer.callbacks.step", str(STEP)]
    path = tmp_path / "project.yaml"
    path.write_text(config)
    return [*argv, "--config", str(path)]


def _sigterm_when_waiting(run: ForkedRun, tmp_path: Path) -> tuple[str, str]:
    """SIGTERM to the run's process group (as a scheduler sends it) once it waits at :data:`STEP`."""
    ready = tmp_path / "waiting.txt"
    deadline = time.monotonic() + 180
    while not ready.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the run never reached the waiting step"
    os.killpg(run.pid, signal.SIGTERM)
    out, err = run.communicate(timeout=120)
    return out.decode(), err.decode()


def _assert_stopped_as_the_default_config_stops(tmp_path: Path, code: int, out: str, err: str) -> None:
    assert code == SIGTERM_EXIT_CODE, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("lit-gpu:")]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"lit-gpu: stopped by SIGTERM at step {STEP - 1} "), lines  # metrics.csv's
    assert "resume with: lit-gpu fit " in lines[0]
    assert lines[0].endswith(f"--ckpt_path {RUN}/version_0/checkpoints/last.ckpt")  # this run's, by path
    assert "Traceback" not in err and "Received SIGTERM" not in err
    ckpt_dir = tmp_path / RUN / "version_0" / "checkpoints"
    assert [p.name for p in ckpt_dir.iterdir()] == ["last.ckpt"]
    ckpt = torch.load(ckpt_dir / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == STEP
    progress = ckpt["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert progress["completed"] == progress["ready"] == STEP  # a step boundary, mid-epoch


@pytest.mark.parametrize(
    "config",
    [OWN_LIST, pytest.param(None, marks=pytest.mark.full)],
    ids=["own-callbacks-list", "default-config"],
)
def test_sigterm_mid_epoch_with_a_configs_own_callbacks_list(config, tmp_path, cli_env):
    run = popen(_argv(tmp_path, config), tmp_path, cli_env)
    out, err = _sigterm_when_waiting(run, tmp_path)
    _assert_stopped_as_the_default_config_stops(tmp_path, run.returncode, out, err)
    if config is not None:  # the project's callbacks ran: its model summary is printed
        assert "Trainable params" in out, out[-2000:]


@pytest.mark.full
def test_a_users_instance_of_a_guarantee_class_replaces_lit_gpus(tmp_path, cli_env):
    run = popen(_argv(tmp_path, WITH_MY_STOP), tmp_path, cli_env)
    out, err = _sigterm_when_waiting(run, tmp_path)
    _assert_stopped_as_the_default_config_stops(tmp_path, run.returncode, out, err)  # one line: one handler
    assert (tmp_path / "my_stop.txt").read_text() == "fit"  # the user's instance was the one on the Trainer


@pytest.mark.full
def test_the_switch_off_gives_lightnings_behaviour(tmp_path, cli_env):
    run = popen(_argv(tmp_path, OWN_LIST), tmp_path, {**cli_env, SWITCH: "false"})
    out, err = _sigterm_when_waiting(run, tmp_path)
    assert run.returncode == 0, err[-3000:]  # Lightning's SIGTERMException is a SystemExit()
    assert "Received SIGTERM" in err, err[-3000:]
    assert not [ln for ln in err.splitlines() if ln.startswith("lit-gpu:") and "stopped" in ln], err[-3000:]
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing saved
