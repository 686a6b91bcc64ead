"""Whole-step capture (``--speed.cuda_graph``): the mechanism around the graph, on a CPU.

``StepGraph.allow_cpu`` swaps the CUDA graph for :class:`_Rerun` (the captured function run again at
each replay), so everything lit_gpu does around the graph runs here: warm-up, input buffers, the
loss cloned out of the graph's memory, logging and metrics after the replay, counters, learning rates
as tensors, plain checkpoints, and every guard. The graph itself is tested on a GPU
(``tests/integration/test_gpu_modes_cli.py``'s ``gpu`` tests, ``benchmarks/on_device.sh``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lit_gpu.callbacks.nan_guard import NaNGuard, NonFiniteLossError
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.fastpath import graph as step_graph
from lit_gpu.fastpath.graph import StepGraph
from lit_gpu.fastpath.step import LeanOptimizerStep
from lit_gpu.modules import ClassificationModule, RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.run_if import RunIf
from tests.helpers.trainers import quiet_trainer

ASIDE = "whole-step capture (speed.cuda_graph) stands aside"


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(StepGraph, "allow_cpu", True)


def _module(scheduler: Any = None, optimizer: Any = None) -> RegressionModule:
    torch.manual_seed(0)
    return RegressionModule(
        SimpleModel(),
        optimizer=optimizer or (lambda p: torch.optim.Adam(p, lr=0.01)),
        scheduler=scheduler,
        scheduler_interval="step",
    )


def _fit(tmp_path, module, capture: bool, *, callbacks=(), num_samples=256, **trainer_kwargs):
    lean = LeanOptimizerStep()
    speed = SpeedLevers(cuda_graph=capture, cuda_graph_warmup=2)
    trainer = quiet_trainer(tmp_path, callbacks=[lean, speed, *callbacks], **trainer_kwargs)
    data = SyntheticRegressionDataModule(num_samples=num_samples, batch_size=32)
    seen: dict[str, Any] = {}

    class Spy(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.setdefault("graph", lean.graph)
            if lean.graph is not None:  # what the capture holds during the fit (released at its end)
                seen["graph_type"], seen["loss_buffer"] = type(lean.graph.graph), lean.graph.loss
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            seen.setdefault("lr", []).append((type(lr), float(lr)))

    trainer.callbacks.append(Spy())
    trainer.fit(module, datamodule=data)
    return trainer, seen.get("graph"), seen


def _weights(module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def test_captured_steps_train_exactly_as_ordinary_steps(tmp_path, on_cpu, capsys):
    plain = _module()
    t1, graph1, _ = _fit(tmp_path, plain, capture=False, max_epochs=2)
    captured = _module()
    t2, graph, _ = _fit(tmp_path, captured, capture=True, max_epochs=2)
    assert graph1 is None and graph is not None and graph.aside is None
    assert graph.replays == 16 - 2  # 8 batches x 2 epochs, 2 warm-up steps
    for a, b in zip(_weights(plain), _weights(captured), strict=True):
        assert torch.equal(a, b)
    assert t1.global_step == t2.global_step == 16
    opt1, opt2 = (t.fit_loop.epoch_loop.automatic_optimization.optim_progress for t in (t1, t2))
    assert opt1.state_dict() == opt2.state_dict()  # Lightning's counters moved as Lightning moves them
    m1, m2 = t1.callback_metrics, t2.callback_metrics
    assert sorted(m1) == sorted(m2)
    for key in m1:
        assert torch.equal(m1[key], m2[key]), key
    assert ASIDE not in capsys.readouterr().err


def test_the_loss_each_step_returns_is_its_own_not_the_graphs_buffer(tmp_path, on_cpu):
    losses: list[torch.Tensor] = []

    class Keep(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(outputs["loss"])

    _, graph, seen = _fit(tmp_path, _module(), capture=True, callbacks=[Keep()])
    assert graph.replays > 2
    values = [float(v) for v in losses]
    assert len(set(values)) == len(values)  # kept tensors did not all become the last step's
    assert seen["loss_buffer"] is not None and all(v is not seen["loss_buffer"] for v in losses)


def test_the_fit_end_releases_what_the_capture_held(tmp_path, on_cpu):
    trainer, graph, seen = _fit(tmp_path, _module(_steplr, _adam), capture=True)
    assert seen["graph_type"] is step_graph._Rerun and graph.replays > 2
    assert [t for t, _ in seen["lr"]][-1] is torch.Tensor  # during the fit: the graph's LR tensor
    assert graph.graph is graph.static is graph.outputs is graph.loss is graph.stream is None
    group = trainer.optimizers[0].param_groups[0]
    assert type(group["lr"]) is float  # the optimizer put back as it was
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert [type(v) for v in scheduler.get_last_lr()] == [float]  # no tensor of the capture left behind


def test_a_scheduler_reaches_the_graph_and_checkpoints_keep_plain_floats(tmp_path, on_cpu):
    def scheduler(opt):
        return torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)

    plain, captured = _module(scheduler), _module(scheduler)
    _fit(tmp_path, plain, capture=False)
    trainer, graph, seen = _fit(tmp_path, captured, capture=True)
    assert graph.aside is None and graph.replays == 8 - 2
    lrs = seen["lr"]
    assert all(kind is torch.Tensor for kind, _ in lrs)  # on the device while the fit runs
    assert [lr for _, lr in lrs] == pytest.approx([0.01 * 0.5**i for i in range(1, 9)])
    for a, b in zip(_weights(plain), _weights(captured), strict=True):
        torch.testing.assert_close(a, b)  # a float32 lr tensor against a Python float: rounding only
    group = trainer.optimizers[0].param_groups[0]
    assert type(group["lr"]) is float and group["capturable"] is False  # put back after the fit
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    saved = torch.load(tmp_path / "after.ckpt", weights_only=True)
    assert type(saved["optimizer_states"][0]["param_groups"][0]["lr"]) is float


def test_a_checkpoint_written_during_the_fit_holds_floats_and_the_optimizers_own_settings(tmp_path, on_cpu):
    saved: list[dict] = []

    class SaveMidFit(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == 5:
                path = tmp_path / "mid.ckpt"
                trainer.save_checkpoint(path)
                saved.append(torch.load(path, weights_only=True))

    def scheduler(opt):
        return torch.optim.lr_scheduler.StepLR(opt, 1, 0.9)

    _, graph, _ = _fit(tmp_path, _module(scheduler), capture=True, callbacks=[SaveMidFit()])
    group = saved[0]["optimizer_states"][0]["param_groups"][0]
    assert type(group["lr"]) is float and group["capturable"] is False
    assert all(type(v) is float for v in saved[0]["lr_schedulers"][0]["_last_lr"])


def test_a_batch_of_another_shape_runs_as_an_ordinary_step(tmp_path, on_cpu):
    plain, captured = _module(), _module()
    _fit(tmp_path, plain, capture=False, num_samples=250)  # last batch: 26 samples
    _, graph, _ = _fit(tmp_path, captured, capture=True, num_samples=250)
    assert graph.aside is None and graph.replays == 8 - 2 - 1
    for a, b in zip(_weights(plain), _weights(captured), strict=True):
        assert torch.equal(a, b)


def test_a_changed_hyperparameter_makes_it_stand_aside_with_one_line(tmp_path, on_cpu, capsys):
    class Decay(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 5:
                trainer.optimizers[0].param_groups[0]["weight_decay"] = 0.1

    plain, captured = _module(), _module()
    _fit(tmp_path, plain, capture=False, callbacks=[Decay()])
    _, graph, _ = _fit(tmp_path, captured, capture=True, callbacks=[Decay()])
    assert graph.aside == "the optimizer's 'weight_decay' changed after the capture"
    err = capsys.readouterr().err
    assert err.count(ASIDE) == 1 and "'weight_decay' changed" in err
    for a, b in zip(_weights(plain), _weights(captured), strict=True):
        assert torch.equal(a, b)


def test_a_capture_that_fails_stands_aside_and_the_step_still_runs(tmp_path, on_cpu, monkeypatch, capsys):
    def broken(self):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(StepGraph, "_capture", broken)
    plain, captured = _module(), _module()
    t1, _, _ = _fit(tmp_path, plain, capture=False)
    t2, graph, _ = _fit(tmp_path, captured, capture=True)
    assert graph.aside.startswith("the step could not be captured (operation not permitted")
    assert capsys.readouterr().err.count(ASIDE) == 1
    assert t1.global_step == t2.global_step == 8
    for a, b in zip(_weights(plain), _weights(captured), strict=True):
        assert torch.equal(a, b)


def _steplr(opt):
    return torch.optim.lr_scheduler.StepLR(opt, 1, 0.8)


def _adam(params):
    return torch.optim.Adam(params, lr=0.01)


class AfterBackward(Callback):
    def on_after_backward(self, trainer, pl_module):
        pass


class NotLit(RegressionModule):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize(
    ("make", "callbacks", "reason"),
    [
        (lambda: NotLit(SimpleModel()), [], "NotLit overrides training_step"),
        (_module, [AfterBackward()], "AfterBackward.on_after_backward runs inside every step"),
        (
            lambda: _module(
                lambda o: torch.optim.lr_scheduler.StepLR(o, 1), lambda p: torch.optim.SGD(p, lr=0.1)
            ),
            [],
            "SGD cannot take its learning rate from a tensor",
        ),
        (
            lambda: _module(lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=100)),
            [],
            "OneCycleLR changes momentum every step",
        ),
    ],
)
def test_what_it_cannot_capture_is_named_in_one_line(tmp_path, on_cpu, capsys, make, callbacks, reason):
    trainer, graph, _ = _fit(tmp_path, make(), capture=True, callbacks=callbacks)
    assert graph is None
    err = capsys.readouterr().err
    assert err.count(ASIDE) == 1 and reason in err
    assert trainer.global_step == 8


def test_without_a_gpu_it_says_so_once_and_trains(tmp_path, capsys):
    trainer, graph, _ = _fit(tmp_path, _module(), capture=True)
    assert graph is None and trainer.global_step == 8
    err = capsys.readouterr().err
    assert err.count(ASIDE) == 1 and "it needs a CUDA device" in err


def test_where_the_lean_step_stands_aside_the_capture_says_why(tmp_path, on_cpu, capsys):
    trainer, graph, _ = _fit(tmp_path, _module(), capture=True, gradient_clip_val=1.0)
    assert graph is None and trainer.global_step == 8
    assert "stands aside, steps run as usual: gradient clipping" in capsys.readouterr().err


def test_nan_guard_checks_each_replayed_step(tmp_path, on_cpu):
    class Poison(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 5:
                batch[0].fill_(float("nan"))

    with pytest.raises(NonFiniteLossError, match="at step 5 "):
        _fit(tmp_path, _module(), capture=True, callbacks=[NaNGuard(), Poison()])


def test_classification_metrics_are_the_steps_own(tmp_path, on_cpu):
    def make():
        torch.manual_seed(0)
        return ClassificationModule(torch.nn.Linear(10, 3), num_classes=3, train_acc=True)

    class Labels(SyntheticRegressionDataModule):
        def setup(self, stage=None):
            super().setup(stage)
            for split in (self.train_set, self.val_set, self.test_set):
                x, y = split.tensors
                split.tensors = (x, y.argmax(1).clamp(max=2))

    results = []
    for capture in (False, True):
        lean, speed = LeanOptimizerStep(), SpeedLevers(cuda_graph=capture, cuda_graph_warmup=2)
        trainer = quiet_trainer(tmp_path, callbacks=[lean, speed], limit_val_batches=0)
        module = make()
        trainer.fit(module, datamodule=Labels(num_samples=256, batch_size=32))
        results.append(dict(trainer.callback_metrics))
    assert sorted(results[0]) == sorted(results[1])
    assert "train/acc" in results[1]
    for key in results[0]:
        assert torch.equal(results[0][key], results[1][key]), key


def test_the_replay_hooks_attribute_is_the_one_nan_guard_declares():
    assert step_graph.REPLAY_HOOKS_ATTR == "graph_replay_hooks"
    assert NaNGuard.graph_replay_hooks == ("on_before_backward",)


# ---- on a GPU: the real CUDA graph ----------------------------------------------------------------
@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_on_a_gpu_replayed_steps_train_as_ordinary_steps(tmp_path, precision, capsys):
    gpu = dict(accelerator="gpu", devices=1, precision=precision, max_epochs=2)
    plain, captured = _module(_steplr, _adam), _module(_steplr, _adam)
    t1, _, _ = _fit(tmp_path, plain, capture=False, **gpu)
    t2, graph, seen = _fit(tmp_path, captured, capture=True, **gpu)
    assert ASIDE not in capsys.readouterr().err
    assert graph.aside is None and graph.replays == 16 - 2 and seen["graph_type"] is torch.cuda.CUDAGraph
    assert [lr for _, lr in seen["lr"]] == pytest.approx([0.01 * 0.8**i for i in range(1, 17)], rel=1e-5)
    tol = dict(rtol=1e-4, atol=1e-5) if precision == "32-true" else dict(rtol=2e-2, atol=2e-3)
    for a, b in zip(_weights(plain), _weights(captured), strict=True):
        torch.testing.assert_close(a, b, **tol)
    torch.testing.assert_close(
        t1.callback_metrics["train/loss_epoch"], t2.callback_metrics["train/loss_epoch"], **tol
    )
    group = t2.optimizers[0].param_groups[0]
    assert type(group["lr"]) is float and group["capturable"] is False


class SyncingLoss(RegressionModule):
    def compute_loss(self, outputs, targets):
        loss = super().compute_loss(outputs, targets)
        if float(loss) < 0:  # a host read of a GPU value: cannot be captured
            raise AssertionError
        return loss


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_on_a_gpu_a_step_that_cannot_be_captured_stands_aside_and_trains_on(tmp_path, capsys):
    torch.manual_seed(0)
    module = SyncingLoss(SimpleModel(), optimizer=_adam)
    trainer, graph, _ = _fit(tmp_path, module, capture=True, accelerator="gpu", devices=1, max_epochs=2)
    assert graph.aside.startswith("the step could not be captured")
    assert capsys.readouterr().err.count(ASIDE) == 1
    assert trainer.global_step == 16
    assert all(torch.isfinite(p).all() for p in module.parameters())
