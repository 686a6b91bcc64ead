"""Issue 39's five behaviour changes, each as Lightning's own tests found it: with lit_gpu's default
callbacks in the Trainer, Lightning behaves as Lightning."""

from __future__ import annotations

import copy
import pickle
from unittest.mock import Mock

import lightning.pytorch as pl
import pytest
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import SpikeDetection

from lit_gpu.callbacks.nan_guard import NaNGuard, NonFiniteLossError
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.cli.lightning_cli import DEFAULT_CALLBACKS
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel


def _defaults() -> list[pl.Callback]:
    return [cls() for cls in DEFAULT_CALLBACKS] + [SpeedLevers(), NaNGuard()]


def _trainer(tmp_path, **kwargs) -> pl.Trainer:
    args = dict(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                enable_model_summary=False, default_root_dir=tmp_path, callbacks=_defaults())  # fmt: skip
    args.update(kwargs)
    return pl.Trainer(**args)


def _data() -> SyntheticRegressionDataModule:
    return SyntheticRegressionDataModule(num_samples=128, batch_size=32)


def test_a_trainer_with_the_defaults_pickles_and_deep_copies_before_and_after_a_fit(tmp_path):
    trainer = _trainer(tmp_path)
    pickle.dumps(trainer)
    copy.deepcopy(trainer)
    trainer.fit(RegressionModule(SimpleModel()), datamodule=_data())
    assert "process_dataloader" not in vars(trainer.strategy)  # the interrupt callback's patch is gone
    pickle.dumps(trainer)
    copy.deepcopy(trainer)


def test_an_optimizer_that_never_runs_the_closure_is_lightnings_error(tmp_path):
    class NoClosure(torch.optim.SGD):
        def step(self, closure=None):  # never calls the closure: no training_step ran
            return None

    module = RegressionModule(SimpleModel(), optimizer=lambda p: NoClosure(p, lr=0.1))
    with pytest.raises(MisconfigurationException, match="The closure hasn't been executed"):
        _trainer(tmp_path).fit(module, datamodule=_data())


@pytest.mark.parametrize("hook", ["optimizer_step", "configure_gradient_clipping", "clip_gradients"])
def test_a_step_hook_wrapped_on_the_module_object_is_called_every_step(tmp_path, hook):
    module = RegressionModule(SimpleModel())
    wrapper = Mock(wraps=getattr(module, hook))
    setattr(module, hook, wrapper)
    _trainer(tmp_path, max_steps=3).fit(module, datamodule=_data())
    assert wrapper.call_count == 3


@pytest.mark.parametrize(
    "hook", ["on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer"]
)
def test_a_transfer_hook_wrapped_on_the_module_object_is_called_every_batch(tmp_path, hook):
    module = RegressionModule(SimpleModel())
    wrapper = Mock(wraps=getattr(module, hook))
    setattr(module, hook, wrapper)
    _trainer(tmp_path, max_steps=3, limit_val_batches=0).fit(module, datamodule=_data())
    assert wrapper.call_count == 3


class NaNAt(RegressionModule):
    def compute_loss(self, outputs, targets):
        loss = super().compute_loss(outputs, targets)
        return loss * float("nan") if self.trainer.global_step == 2 else loss


def test_nan_guard_answers_a_plain_run(tmp_path):
    with pytest.raises(NonFiniteLossError):
        _trainer(tmp_path).fit(NaNAt(SimpleModel()), datamodule=_data())


def test_with_detect_anomaly_autograd_answers_not_nan_guard(tmp_path):
    class NaNGrad(RegressionModule):
        def compute_loss(self, outputs, targets):
            loss = super().compute_loss(outputs, targets)
            return torch.sqrt(loss - loss - 1) if self.trainer.global_step == 2 else loss

    with pytest.raises(RuntimeError, match="returned nan values") as info:
        _trainer(tmp_path, detect_anomaly=True).fit(NaNGrad(SimpleModel()), datamodule=_data())
    assert not isinstance(info.value, NonFiniteLossError)


def test_with_spike_detection_lightning_sees_the_loss(tmp_path):
    seen: list[float] = []

    class Spy(SpikeDetection):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(float(outputs["loss"]))
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    callbacks = [*_defaults(), Spy(finite_only=False, warmup=100)]
    _trainer(tmp_path, callbacks=callbacks).fit(NaNAt(SimpleModel()), datamodule=_data())
    assert len(seen) == 4 and seen[2] != seen[2]  # the NaN step reached Lightning's SpikeDetection


def test_a_changed_lightning_source_makes_the_whole_fast_path_stand_aside_in_one_line(
    tmp_path, monkeypatch, capsys
):
    """The gate (lit_gpu.upstream): one mirrored Lightning function with another source, and the lean
    step, the lean batch and the idle-hook hiding all stand aside; training is stock Lightning's exactly."""
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    from lit_gpu import upstream as gate
    from lit_gpu.fastpath.batch import LeanTrainingBatch
    from lit_gpu.fastpath.step import LeanOptimizerStep, SkipIdleHooks

    def fit(callbacks) -> RegressionModule:
        torch.manual_seed(0)
        module = RegressionModule(SimpleModel())
        _trainer(tmp_path, callbacks=callbacks, max_epochs=2).fit(module, datamodule=_data())
        return module

    stock = fit([])
    original = _TrainingEpochLoop.advance

    def advance(self, data_fetcher):  # another source: a Lightning release that changed this method
        return original(self, data_fetcher)

    monkeypatch.setattr(_TrainingEpochLoop, "advance", advance)
    gate.reset()
    callbacks = _defaults()
    gated = fit(callbacks)
    fit(_defaults())  # a second fit in the process: the line is not repeated
    err = capsys.readouterr().err
    line = "lit_gpu's fast training loop stands aside, Lightning's own loop runs: "
    assert err.count(line) == 1 and "_TrainingEpochLoop.advance differs from the code lit_gpu mirrors" in err
    for cb in callbacks:
        if isinstance(cb, LeanOptimizerStep | LeanTrainingBatch):
            assert cb.blocker is not None and "differs from the code lit_gpu mirrors" in cb.blocker
        if isinstance(cb, SkipIdleHooks):
            assert cb._hidden == []
    for a, b in zip(stock.parameters(), gated.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_lightning_newer_than_verified_never_runs_the_mirrored_code(tmp_path, monkeypatch, capsys):
    import lightning

    from lit_gpu import upstream as gate
    from lit_gpu.fastpath.step import LeanOptimizerStep

    monkeypatch.setattr(lightning, "__version__", "2.99.0")
    gate.reset()
    callbacks = _defaults()
    _trainer(tmp_path, callbacks=callbacks, max_steps=2).fit(
        RegressionModule(SimpleModel()), datamodule=_data()
    )
    lean = next(cb for cb in callbacks if isinstance(cb, LeanOptimizerStep))
    assert (
        lean.blocker == f"Lightning 2.99.0 is newer than {gate.VERIFIED_UP_TO}, the newest it was verified on"
    )
    assert "stands aside, Lightning's own loop runs: Lightning 2.99.0 is newer" in capsys.readouterr().err


def test_a_stand_in_checkpoint_callback_without_dirpath_is_fine(tmp_path):
    """As in Lightning's test_stateful_trainer_ckpt_path_support: a spec'd Mock has no ``dirpath``."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lit_gpu.preemption import checkpoint_folder

    trainer = _trainer(tmp_path, callbacks=[Mock(spec=ModelCheckpoint), *_defaults()])
    assert checkpoint_folder(trainer) == tmp_path / "checkpoints"
