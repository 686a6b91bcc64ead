"""Legitimate changes and legitimate checkpoints across a resume (issue 56).

* The config's optimizer (SGD -> Adam), schedule (OneCycleLR ``total_steps`` 8 -> 16) or param-group layout
  changed between save and resume: one line naming what the checkpoint holds, what the config builds and
  ``--fresh_optimizer``; never a traceback, never the checkpoint's setting in place of the config's; the
  checkpoint is left as it was. With ``--fresh_optimizer true`` the fit continues from the checkpoint's
  weights and step with the optimizer the config builds.
* A numpy number in the optimizer and scheduler state (a LambdaLR of ``np.cos``, as UvA's tutorial 5 writes
  it): ``lit-gpu test --ckpt_path last`` and ``export`` read the checkpoint lit-gpu wrote, and one written by
  plain Lightning (its own CheckpointIO).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.integration.test_optimizer_matrix import _args, fit, last

STOP = ["--trainer.max_steps", "5"]


def _stopped(folder: Path, optimizer: str, scheduler: str | None, *extra: str) -> Path:
    code, out = fit(folder, _args(optimizer, scheduler, *extra, *STOP))
    assert code == 0, out[-3000:]
    return folder / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"


def _refused(folder: Path, args: list[str], held: str, built: str, detail: str) -> None:
    ckpt = folder / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    before = ckpt.read_bytes()
    code, out = fit(folder, args)
    errors = [line for line in out.splitlines() if line.startswith("lit-gpu: error:")]
    assert code == 2 and len(errors) == 1, out[-3000:]
    assert "Traceback" not in out
    line = errors[0]
    assert f"the checkpoint holds {held}, the config builds {built}" in line, line
    assert detail in line and "--fresh_optimizer true" in line, line
    assert ckpt.read_bytes() == before  # nothing lost: the checkpoint is as it was


def test_a_changed_optimizer_is_one_line_then_fresh_optimizer_continues(tmp_path):
    _stopped(tmp_path, "SGD", None)
    _refused(
        tmp_path,
        _args("Adam", None, "--ckpt_path", "last"),
        "the state of SGD",
        "Adam",
        "param group 0 holds dampening, momentum, nesterov",
    )
    code, out = fit(tmp_path, _args("Adam", None, "--ckpt_path", "last", "--fresh_optimizer", "true"))
    assert code == 0, out[-3000:]
    assert "started Adam and no scheduler fresh (--fresh_optimizer)" in out
    resumed = last(tmp_path)
    assert resumed["global_step"] == 8
    assert set(resumed["optimizer_states"][0]["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert float(resumed["optimizer_states"][0]["state"][0]["step"]) == 3  # steps 6..8, fresh from 0


def test_a_changed_schedule_is_one_line_not_the_checkpoints_setting(tmp_path):
    """``Tried to step 9 times`` before, and total_steps=8 from the checkpoint in place of the config's 16."""
    _stopped(tmp_path, "SGD", "OneCycleLR")
    _refused(
        tmp_path,
        _args("SGD", "OneCycleLR", "--model.total_steps", "16", "--ckpt_path", "last"),
        "a scheduler state",
        "OneCycleLR",
        "total_steps=8, where the config's OneCycleLR has total_steps=16",
    )
    code, out = fit(
        tmp_path,
        _args(
            "SGD",
            "OneCycleLR",
            "--model.total_steps",
            "16",
            "--ckpt_path",
            "last",
            "--fresh_optimizer",
            "true",
        ),
    )
    assert code == 0, out[-3000:]
    assert last(tmp_path)["lr_schedulers"][0]["total_steps"] == 16


@pytest.mark.parametrize(("saved", "resumed"), [("1", "2"), pytest.param("2", "1", marks=pytest.mark.full)])
def test_a_changed_param_group_layout_is_one_line(tmp_path, saved, resumed):
    _stopped(tmp_path, "SGD", None, "--model.groups", saved)
    args = _args("SGD", None, "--model.groups", resumed, "--ckpt_path", "last")
    _refused(
        tmp_path, args, "the state of SGD", "SGD", f"{saved} param groups, where the config builds {resumed}"
    )


def test_test_and_export_read_a_checkpoint_with_numpy_numbers_lit_gpu_wrote(tmp_path):
    ckpt = _stopped(tmp_path, "SGD", "LambdaLR")
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert type(saved["optimizer_states"][0]["param_groups"][0]["lr"]) is np.float64  # the subject
    with pytest.raises(Exception, match="numpy"):
        torch.load(ckpt, map_location="cpu", weights_only=True)  # torch's default list refuses it
    test_args = ["test", *_args("SGD", "LambdaLR")[1:], "--ckpt_path", "last"]
    code, out = fit(tmp_path, test_args)
    assert code == 0 and "pickled Python objects" not in out, out[-3000:]
    code, out = fit(tmp_path, ["export", str(ckpt), "--out", str(tmp_path / "net.safetensors")])
    assert code == 0, out[-3000:]
    assert (tmp_path / "net.safetensors").is_file()


def test_a_checkpoint_plain_lightning_wrote_with_numpy_numbers_is_read(tmp_path):
    import lightning.pytorch as pl

    from lit_gpu.checkpoints.read import read_checkpoint, read_for_resume
    from lit_gpu.data import SyntheticRegressionDataModule
    from tests.helpers.optim_matrix import MatrixRegression

    trainer = pl.Trainer(
        max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu"
    )
    model = MatrixRegression("SGD", "LambdaLR")
    trainer.fit(
        model, SyntheticRegressionDataModule(in_features=10, out_features=10, num_samples=64, batch_size=16)
    )
    path = tmp_path / "plain.ckpt"
    trainer.save_checkpoint(path)  # Lightning's TorchCheckpointIO: torch.save
    assert read_checkpoint(path)["global_step"] == 3
    restored = read_for_resume(path)
    assert type(restored["optimizer_states"][0]["param_groups"][0]["lr"]) is np.float64


def test_a_finished_one_cycle_run_resumed_as_it_was_has_nothing_to_train_not_a_refusal(tmp_path):
    """A requeued job (or the same command again) after the run reached max_steps = total_steps: Lightning
    stops at once and the schedule never steps, so its full schedule is no refusal; a larger max_steps would
    step it past total_steps: its ValueError, observed at that step, is one line."""
    finished = ["--trainer.max_steps", "8"]
    code, out = fit(tmp_path, _args("SGD", "OneCycleLR", *finished))
    assert code == 0, out[-3000:]
    code, out = fit(tmp_path, _args("SGD", "OneCycleLR", *finished, "--ckpt_path", "last"))
    assert code == 0 and "lit-gpu: nothing to train: " in out and "lit-gpu: error" not in out, out[-3000:]
    _refused(
        tmp_path,
        _args(
            "SGD",
            "OneCycleLR",
            "--trainer.max_steps",
            "9",
            "--trainer.max_epochs",
            "3",
            "--ckpt_path",
            "last",
        ),
        "a scheduler state",
        "OneCycleLR",
        "Tried to step 9 times",  # the first step after the restore, observed
    )
