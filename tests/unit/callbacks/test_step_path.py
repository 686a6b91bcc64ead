"""SkipIdleHooks: no-op per-batch hooks of lit_gpu's and Lightning's own objects leave the dispatch."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lit_gpu.callbacks import RNGStateCallback
from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.fastpath.step import SkipIdleHooks, idle_hooks
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.trainers import quiet_trainer


class UserCallback(Callback):
    """A user's callback (defined outside lit_gpu and Lightning): never touched."""

    def __init__(self) -> None:
        self.ends = 0

    def on_train_batch_end(self, *args) -> None:
        self.ends += 1


class Seen(Callback):
    """Records which of the watched objects' hooks are hidden while training runs."""

    def __init__(self, watched: list[object]) -> None:
        self.watched = watched
        self.hidden: list[list[str]] = []

    def on_train_batch_end(self, trainer, pl_module, *args) -> None:
        if not self.hidden:
            self.hidden = [sorted(k for k, v in vars(o).items() if k.startswith("on_") and v is None)
                           for o in self.watched]  # fmt: skip


def _loader() -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 10, generator=g), torch.randn(32, 10, generator=g))
    return torch.utils.data.DataLoader(data, batch_size=8)


def test_idle_hooks_are_those_the_class_leaves_empty():
    assert "on_before_backward" not in idle_hooks(NaNGuard(), Callback)  # overridden: it checks the loss
    assert "on_train_batch_end" not in idle_hooks(RNGStateCallback(), Callback)
    assert {"on_before_backward", "on_after_backward", "on_train_batch_start"} <= set(
        idle_hooks(RNGStateCallback(), Callback)
    )


def test_hooks_hidden_during_the_run_only_for_own_objects_and_everything_still_runs(tmp_path):
    module = RegressionModule(SimpleModel())
    guard, rng, user = NaNGuard(), RNGStateCallback(), UserCallback()
    seen = Seen([guard, rng, user, module])
    trainer = quiet_trainer(tmp_path, max_steps=4, callbacks=[SkipIdleHooks(), guard, rng, user, seen])
    trainer.fit(module, train_dataloaders=_loader())
    hidden_guard, hidden_rng, hidden_user, hidden_module = seen.hidden
    assert "on_before_backward" not in hidden_guard and "on_after_backward" in hidden_guard
    assert "on_train_batch_end" not in hidden_rng and "on_before_backward" in hidden_rng
    assert hidden_user == []  # a user's callback is left alone
    assert "on_after_backward" in hidden_module and "on_train_batch_start" not in hidden_module
    assert user.ends == 4  # the hooks that do something still ran every step
    assert rng._step_state is not None
    for obj in (guard, rng, user, module):  # after the run the instances are as they were
        assert not [k for k, v in vars(obj).items() if k.startswith("on_") and v is None]


def test_a_run_with_hidden_hooks_trains_exactly_like_one_without(tmp_path):
    def fit(callbacks: list[Callback]) -> dict[str, torch.Tensor]:
        pl.seed_everything(0)
        module = RegressionModule(SimpleModel())
        trainer = quiet_trainer(tmp_path, max_steps=4, callbacks=callbacks)
        trainer.fit(module, train_dataloaders=_loader())
        return module.state_dict()

    plain, skipping = fit([NaNGuard()]), fit([SkipIdleHooks(), NaNGuard()])
    assert all(torch.equal(plain[k], skipping[k]) for k in plain)


def test_validate_test_and_predict_after_fit_with_hidden_hooks(tmp_path):
    """Lightning reads the module's evaluation batch hook signatures: those are never hidden."""
    module = RegressionModule(SimpleModel())
    trainer = quiet_trainer(tmp_path, max_steps=2, callbacks=[SkipIdleHooks(), NaNGuard()])
    trainer.fit(module, train_dataloaders=_loader(), val_dataloaders=_loader())
    assert set(trainer.test(module, _loader(), verbose=False)[0]) == {"test/loss"}
    assert trainer.validate(module, _loader(), verbose=False)[0]["val/loss"] >= 0
    assert len(trainer.predict(module, _loader())) == 4


def test_hook_names_go_through_a_modules_own_setattr_and_straight_to_dict_otherwise(tmp_path):
    import lightning.pytorch as pl

    from lit_gpu.fastpath.step import HookDispatch

    class Watching(pl.LightningModule):
        def __setattr__(self, name, value):
            if name == "_current_fx_name":
                self.__dict__.setdefault("names_set", []).append(value)
            super().__setattr__(name, value)

        def on_before_zero_grad(self, optimizer):
            return self._current_fx_name

    class Plain(pl.LightningModule):
        def on_before_zero_grad(self, optimizer):
            return self._current_fx_name

    trainer = quiet_trainer(tmp_path)
    for module, through_setattr in ((Watching(), True), (Plain(), False)):
        module.__dict__.pop("names_set", None)
        seen = HookDispatch(trainer, module)("on_before_zero_grad", None)
        assert seen == "on_before_zero_grad" and module._current_fx_name is None
        expected = ["on_before_zero_grad", None] if through_setattr else None
        assert module.__dict__.get("names_set") == expected


@pytest.mark.parametrize(("precision", "direct"), [("32-true", True), ("bf16-mixed", False)])
def test_the_lean_step_calls_training_step_itself_only_with_the_plain_precision(tmp_path, precision, direct):
    from lit_gpu.fastpath.step import _plain_strategy_step

    seen = []

    class Probe(Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append(_plain_strategy_step(trainer))

    trainer = quiet_trainer(tmp_path, max_steps=1, precision=precision, callbacks=[Probe()])
    trainer.fit(RegressionModule(SimpleModel(10, 10)), train_dataloaders=_loader())
    assert seen == [direct]


def test_the_dispatch_skips_lightnings_empty_hooks_of_any_callback_and_module():
    from types import SimpleNamespace

    from lit_gpu.fastpath.step import HookDispatch

    calls = []

    class Plain(Callback):  # a user's callback: SkipIdleHooks leaves it alone
        pass

    class Busy(Callback):
        def on_after_backward(self, trainer, pl_module):
            calls.append(("callback", pl_module._current_fx_name))

    class Module(pl.LightningModule):
        def on_train_batch_start(self, batch, batch_idx):
            calls.append(("module", self._current_fx_name))
            return -1

    plain, busy, module = Plain(), Busy(), Module()
    dispatch = HookDispatch(SimpleNamespace(callbacks=[plain, busy]), module)
    assert dispatch("on_after_backward") is None and calls == [("callback", "on_after_backward")]
    assert dispatch._callback_fns["on_after_backward"] == [busy.on_after_backward]
    assert dispatch("on_before_zero_grad", None) is None
    assert dispatch._callback_fns["on_before_zero_grad"] == []
    assert dispatch._module_has == {"on_after_backward": False, "on_before_zero_grad": False}
    assert dispatch("on_train_batch_start", None, 0) == -1 and calls[-1] == ("module", "on_train_batch_start")
    plain.on_after_backward = lambda trainer, pl_module: calls.append(("instance", None))  # set on the object
    dispatch.trainer.callbacks = [plain, busy]  # a new list: looked up again
    dispatch("on_after_backward")
    assert calls[-2:] == [("instance", None), ("callback", "on_after_backward")]


def test_the_dispatch_knows_an_idle_hook_until_the_callbacks_change(tmp_path):
    from lit_gpu.fastpath.step import HookDispatch

    class Late(Callback):
        def __init__(self) -> None:
            self.calls = 0

        def on_before_zero_grad(self, trainer, pl_module, optimizer) -> None:
            self.calls += 1
            assert pl_module._current_fx_name == "on_before_zero_grad"

    trainer = quiet_trainer(tmp_path, callbacks=[UserCallback()])
    module = RegressionModule(SimpleModel())
    dispatch = HookDispatch(trainer, module)
    assert dispatch.calls("on_before_zero_grad")  # not known yet
    assert dispatch("on_before_zero_grad", None) is None
    assert not dispatch.calls("on_before_zero_grad")  # nothing implements it
    late = Late()
    trainer.callbacks.append(late)
    assert dispatch.calls("on_before_zero_grad")  # another callback list: asked again
    dispatch("on_before_zero_grad", None)
    assert late.calls == 1 and dispatch.calls("on_before_zero_grad") and module._current_fx_name is None
