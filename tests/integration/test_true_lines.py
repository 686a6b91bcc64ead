"""Every line lit_gpu prints about a resume is true (issue 65, "lines are checked against the run").

* A checkpoint whose Adam state was forged (``exp_avg`` 1e30, ``exp_avg_sq`` 1e-30) blows the loss up in
  the first steps after the resume: NaNGuard's line names that checkpoint as the likely cause and the way
  out (``--fresh_optimizer true``, an earlier checkpoint), not the settings it trained with.
* A module's ``self.logger.experiment.add_histogram`` (and the rest of TensorBoard's media) under
  ``--loggers [csv]``: the line says it is dropped and how to keep it; "the TensorBoard logger's event files
  keep it" only where that logger runs.
* A learning rate changed on resume (``--model.init_args.optimizer.init_args.lr``): beside "the config
  differs from config.yaml", one line says it is not used by the optimizer (torch's ``load_state_dict``
  restores the saved param groups' values) and names ``--fresh_optimizer true``, which applies it.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.simple_run import SIMPLE
from tests.integration.test_optimizer_matrix import _args, fit, last

CKPT = Path("runs") / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"


def _errors(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("lit-gpu: error:")]


def test_a_forged_adam_state_is_blamed_on_the_checkpoint_not_the_settings(tmp_path):
    code, out = fit(tmp_path, _args("Adam", None, "--trainer.max_steps", "5"))
    assert code == 0, out[-3000:]
    path = tmp_path / CKPT
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    for state in checkpoint["optimizer_states"][0]["state"].values():
        state["exp_avg"].fill_(1e30)
        state["exp_avg_sq"].fill_(1e-30)
    torch.save(checkpoint, path)
    forged = path.read_bytes()

    code, out = fit(tmp_path, _args("Adam", None, "--ckpt_path", "last"))
    errors = _errors(out)
    assert code == 2 and len(errors) == 1, out[-3000:]
    line = errors[0]
    assert "loss became inf at step 6" in line and "1 optimizer step after resuming from " in line, line
    assert str(CKPT) in line and "left the checkpoint as it was" in line, line
    assert "--fresh_optimizer true" in line and "an earlier checkpoint" in line, line
    assert "learning rate" not in line and "gradient_clip_val" not in line, line  # not the settings
    assert path.read_bytes() == forged


SMALL = [
    "--trainer.accelerator", "cpu", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
    "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
]  # fmt: skip
EVERY_CALL = [
    "--model", "tests.helpers.logger_calls.EveryWriterCall",
    "--data", "lightning.pytorch.demos.BoringDataModule",
]  # fmt: skip


@pytest.mark.parametrize("loggers", ["[csv]", "[csv,tensorboard]"])
def test_a_media_call_the_csv_logger_ignores_is_said_kept_only_where_tensorboard_runs(loggers, tmp_path):
    from lit_gpu.cli import main

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
        mp.chdir(tmp_path)
        mp.setattr(sys, "argv", ["lit-gpu"])
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        main(["fit", *EVERY_CALL, *SMALL, "--loggers", loggers])
    lines = [ln for ln in out.getvalue().splitlines() if "the CSV logger keeps no add_histogram" in ln]
    assert len(lines) == 1, out.getvalue()[-3000:]
    run = tmp_path / CKPT.parent.parent
    events = list(run.glob("events.out.tfevents.*"))
    if loggers == "[csv]":
        assert not events
        assert "dropped" in lines[0] and "--loggers [csv,tensorboard]" in lines[0], lines[0]
        assert "event files" not in lines[0], lines[0]
    else:
        assert events
        assert "event files keep it: tensorboard --logdir " in lines[0], lines[0]


@pytest.mark.parametrize("fresh", [False, True])
def test_a_learning_rate_changed_on_resume_is_said_not_used_unless_fresh_optimizer(fresh, tmp_path):
    code, out = fit(tmp_path, ["fit", *SIMPLE, "--trainer.max_steps", "5"])  # SGD, lr 0.05
    assert code == 0, out[-3000:]
    extra = ["--fresh_optimizer", "true"] if fresh else []
    changed = ["--model.init_args.optimizer.init_args.lr", "0.01", *extra]
    code, out = fit(tmp_path, ["fit", *SIMPLE, "--ckpt_path", "last", *changed])
    assert code == 0, out[-3000:]
    differs = [ln for ln in out.splitlines() if "the config differs from config.yaml" in ln]
    assert len(differs) == 1 and "lr: 0.05 -> 0.01" in differs[0], out[-3000:]
    not_used = [ln for ln in out.splitlines() if "not used, the checkpoint's optimizer state restores" in ln]
    resumed = last(tmp_path)
    assert resumed["global_step"] == 8
    lrs = {group["lr"] for group in resumed["optimizer_states"][0]["param_groups"]}
    if fresh:
        assert not not_used and lrs == {0.01}, out[-3000:]  # the change applied
    else:
        assert lrs == {0.05}  # the checkpoint's: torch's load_state_dict
        assert len(not_used) == 1, out[-3000:]
        line = not_used[0]
        assert "model.init_args.optimizer.init_args.lr 0.01" in line and "restores lr 0.05" in line, line
        assert "--fresh_optimizer true" in line, line
