"""LeanOptimizerStep: Lightning's automatic-optimization step with fewer layers, and nothing else changes."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.fastpath.step import LeanOptimizerStep, SkipIdleHooks
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.trainers import quiet_trainer

STEP_HOOKS = ("on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step")


class Recorder(Callback):
    """Every per-step hook a callback sees, with the hook name ``self.log`` would read and the loss."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lean_seen: list[bool] = []

    def _rec(self, hook: str, pl_module: pl.LightningModule, *extra: Any) -> None:
        self.calls.append((hook, pl_module._current_fx_name, torch.is_grad_enabled(), *extra))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._rec("on_train_batch_start", pl_module, batch_idx, trainer.global_step)
        self.lean_seen.append("run" in vars(trainer.fit_loop.epoch_loop.automatic_optimization))

    def on_before_zero_grad(self, trainer, pl_module, optimizer) -> None:
        self._rec("on_before_zero_grad", pl_module, type(optimizer).__name__)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._rec("on_before_backward", pl_module, round(float(loss.detach()), 6), loss.requires_grad)

    def on_after_backward(self, trainer, pl_module) -> None:
        grads = [p.grad is not None for p in pl_module.parameters()]
        self._rec("on_after_backward", pl_module, all(grads))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self._rec("on_before_optimizer_step", pl_module, type(optimizer).__name__, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) and "loss" in outputs else None
        kept = (round(float(loss), 6), loss.requires_grad) if loss is not None else None
        self._rec("on_train_batch_end", pl_module, batch_idx, trainer.global_step, sorted(outputs), kept)


class HookedModule(RegressionModule):
    """Implements the module's step hooks (so they are dispatched), logs inside them, and can skip steps."""

    def __init__(self, skip_steps: tuple[int, ...] = (), returns_dict: bool = False) -> None:
        super().__init__(SimpleModel(), scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                         scheduler_interval="step")  # fmt: skip
        self.skip_steps, self.returns_dict = skip_steps, returns_dict
        self.seen: list[tuple[str, str | None]] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if batch_idx in self.skip_steps:
            return None
        loss = super().training_step(batch, batch_idx)
        self.log("inside/train", loss.detach(), on_step=True, on_epoch=True)
        return {"loss": loss, "extra": batch_idx} if self.returns_dict else loss

    def on_before_zero_grad(self, optimizer) -> None:
        self.seen.append(("on_before_zero_grad", self._current_fx_name))

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer) -> None:
        self.seen.append(("optimizer_zero_grad", self._current_fx_name))
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def on_before_backward(self, loss) -> None:
        self.seen.append(("on_before_backward", self._current_fx_name))

    def backward(self, loss, *args, **kwargs) -> None:
        self.seen.append(("backward", self._current_fx_name))
        super().backward(loss, *args, **kwargs)

    def on_after_backward(self) -> None:
        self.seen.append(("on_after_backward", self._current_fx_name))
        self.log("inside/after_backward", 1.0, on_step=True)

    def on_before_optimizer_step(self, optimizer) -> None:
        self.seen.append(("on_before_optimizer_step", self._current_fx_name))


def _loader(n: int = 48) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(n, 10, generator=g), torch.randn(n, 10, generator=g))
    return torch.utils.data.DataLoader(data, batch_size=8)


def _fit(
    tmp_path,
    lean: bool,
    module_kwargs: dict | None = None,
    module_cls: type | None = None,
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    pl.seed_everything(0)
    module = (module_cls or HookedModule)(**(module_kwargs or {}))
    recorder, step = Recorder(), LeanOptimizerStep()
    callbacks = [SkipIdleHooks(), NaNGuard(), recorder] + ([step] if lean else [])
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=callbacks, **trainer_kwargs)
    trainer.fit(module, train_dataloaders=_loader())
    return {
        "weights": module.state_dict(),
        "loops": trainer.fit_loop.state_dict(),
        "global_step": trainer.global_step,
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
        "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "calls": recorder.calls,
        "module_hooks": module.seen,
        "lean_seen": recorder.lean_seen,
        "blocker": step.blocker,
        "left_behind": [k for k in ("run",) if k in vars(trainer.fit_loop.epoch_loop.automatic_optimization)]
        + [k for k in ("_build_kwargs",) if k in vars(trainer.fit_loop.epoch_loop)],
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    assert a["loops"] == b["loops"]  # progress counters: global_step, checkpoints and resume read them
    assert (a["global_step"], a["lr"], a["metrics"]) == (b["global_step"], b["lr"], b["metrics"])
    assert a["calls"] == b["calls"]  # same hooks, same order, same fx name, grad mode and arguments
    assert a["module_hooks"] == b["module_hooks"]


@pytest.mark.parametrize(
    ("module_kwargs", "trainer_kwargs"),
    [
        pytest.param({}, {}, id="fp32"),
        pytest.param({}, {"precision": "bf16-mixed"}, id="bf16-mixed"),
        pytest.param({"returns_dict": True}, {}, id="dict-output"),
        pytest.param({"skip_steps": (1, 4)}, {}, id="training_step-returns-None"),
    ],
)
def test_the_lean_step_trains_exactly_as_lightnings_step(tmp_path, module_kwargs, trainer_kwargs):
    lean = _fit(tmp_path, True, module_kwargs, **trainer_kwargs)
    plain = _fit(tmp_path, False, module_kwargs, **trainer_kwargs)
    assert lean["blocker"] is None and all(lean["lean_seen"]) and len(lean["lean_seen"]) == 12
    assert not any(plain["lean_seen"])
    _same(lean, plain)
    assert lean["global_step"] == 12
    assert {h for h, *_ in lean["calls"]} >= set(STEP_HOOKS)
    assert lean["left_behind"] == []  # the fit loop has Lightning's own methods again


class OwnOptimizerStep(HookedModule):
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        optimizer.step(closure=optimizer_closure)


@pytest.mark.parametrize(
    ("trainer_kwargs", "module_cls", "blocker"),
    [
        ({"gradient_clip_val": 0.5}, HookedModule, "gradient clipping"),
        ({"profiler": "simple"}, HookedModule, "profiler SimpleProfiler"),
        ({"precision": "bf16-true"}, HookedModule, "precision plugin HalfPrecision"),
        ({}, OwnOptimizerStep, "the module overrides optimizer_step"),
    ],
)
def test_anything_the_lean_step_does_not_cover_runs_lightnings_step(
    tmp_path, trainer_kwargs, module_cls, blocker
):
    lean = _fit(tmp_path, True, module_cls=module_cls, **trainer_kwargs)
    plain = _fit(tmp_path, False, module_cls=module_cls, **trainer_kwargs)
    assert lean["blocker"] == blocker and not any(lean["lean_seen"])
    _same(lean, plain)


def test_gradient_accumulation_steps_run_lightnings_step_and_train_the_same(tmp_path):
    lean = _fit(tmp_path, True, accumulate_grad_batches=2)
    plain = _fit(tmp_path, False, accumulate_grad_batches=2)
    assert lean["blocker"] is None  # installed; each accumulating step hands over to Lightning's
    _same(lean, plain)
    assert lean["global_step"] == 6


class Joiner(Callback):
    """Adds a recording callback to ``trainer.callbacks`` in the middle of step 3 (in on_before_backward)."""

    def __init__(self) -> None:
        self.late = Recorder()

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if trainer.global_step == 3 and self.late not in trainer.callbacks:
            trainer.callbacks.append(self.late)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "lightning"])
def test_a_callback_added_mid_step_gets_that_steps_later_hooks(tmp_path, lean):
    """Hooks no callback implements are skipped without a call; a callback added during a step is
    still dispatched that hook and the rest of the step's, as Lightning's dispatch over the live
    ``trainer.callbacks`` list does."""
    pl.seed_everything(0)
    joiner, step = Joiner(), LeanOptimizerStep()
    trainer = quiet_trainer(tmp_path, max_steps=5, callbacks=[joiner] + ([step] if lean else []))
    trainer.fit(RegressionModule(SimpleModel()), train_dataloaders=_loader())
    assert step.blocker is None
    hooks = [call[0] for call in joiner.late.calls]
    # step 3 from the on_before_backward it joined in (the dispatch loop reaches it), then step 4 whole
    assert hooks[:4] == [*STEP_HOOKS[1:], "on_train_batch_end"]
    assert hooks[4:] == ["on_train_batch_start", *STEP_HOOKS, "on_train_batch_end"]
