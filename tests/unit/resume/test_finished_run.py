"""A resume of a run that already reached its max_steps / max_epochs: one line, not "fit done: no metrics"."""

from __future__ import annotations

import io

import pytest

from lit_gpu.callbacks.progress import ProgressLog
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.resume.state import finished_line
from tests.helpers.trainers import quiet_trainer


def _fit(tmp_path, ckpt_path=None, **limits):
    out = io.StringIO()
    trainer = quiet_trainer(
        tmp_path, enable_progress_bar=True, callbacks=[ProgressLog(interval=0, stream=out)],
        limit_val_batches=0, **limits,
    )  # fmt: skip
    data = SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=64, batch_size=16)
    trainer.fit(RegressionModule(SimpleModel(4, 2)), datamodule=data, ckpt_path=ckpt_path)
    return trainer, [ln for ln in out.getvalue().splitlines() if ln.startswith("lit-gpu: ")]


@pytest.mark.parametrize(
    "limits, more, said",
    [
        (
            {"max_steps": 3},
            {"max_steps": 3},
            "reached max_steps=3 (step 2, epoch 0); to train it further "
            "resume with a larger --trainer.max_steps (e.g. 6;",
        ),
        (
            {"max_epochs": 2},
            {"max_epochs": 2},
            "reached max_epochs=2 (step 7, epoch 1); to train it further "
            "resume with a larger --trainer.max_epochs (e.g. 4;",
        ),
    ],
)
def test_a_finished_runs_resume_is_one_line(limits, more, said, tmp_path):
    trainer, _ = _fit(tmp_path, **limits)
    ckpt = tmp_path / "done.ckpt"
    trainer.save_checkpoint(ckpt)
    resumed, lines = _fit(tmp_path, ckpt_path=str(ckpt), **more)
    assert resumed.global_step == trainer.global_step  # nothing trained
    assert len(lines) == 2 and lines[0].startswith("lit-gpu: run "), lines
    assert lines[1] == f"lit-gpu: nothing to train: {ckpt} is of a run that already " + said + (
        " add --new_run true to log that into a new folder), or leave out --ckpt_path to start a new run"
    )


def test_a_resume_that_trains_or_a_fresh_fit_keeps_the_end_line(tmp_path):
    trainer, lines = _fit(tmp_path, max_epochs=1)
    assert finished_line(quiet_trainer(tmp_path)) is None  # no checkpoint resumed: never this line
    assert lines[-1].startswith("lit-gpu: fit done in ")
    ckpt = tmp_path / "one.ckpt"
    trainer.save_checkpoint(ckpt)
    _, lines = _fit(tmp_path, ckpt_path=str(ckpt), max_epochs=2)  # one more epoch to train
    assert lines[-1].startswith("lit-gpu: fit done in ") and "nothing to train" not in "".join(lines)


def test_a_resume_that_trains_with_the_progress_bar_off_keeps_the_end_line(tmp_path, capsys):
    """RunLines (``enable_progress_bar: false``, every batch job's config) counts the batches it trained: a
    resumed run that trained was "nothing to train: ... already reached max_epochs"."""
    from lit_gpu.callbacks.progress import RunLines

    data = SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=64, batch_size=16)
    first = quiet_trainer(tmp_path, max_epochs=1, limit_val_batches=0)
    first.fit(RegressionModule(SimpleModel(4, 2)), datamodule=data)
    ckpt = tmp_path / "one.ckpt"
    first.save_checkpoint(ckpt)
    capsys.readouterr()
    resumed = quiet_trainer(tmp_path, max_epochs=2, limit_val_batches=0, callbacks=[RunLines()])
    resumed.fit(RegressionModule(SimpleModel(4, 2)), datamodule=data, ckpt_path=str(ckpt))
    assert resumed.global_step == 2 * first.global_step  # it trained
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("lit-gpu: ")]
    assert lines[-1].startswith("lit-gpu: fit done in "), lines
