"""The gate for the room's accessors: one upstream name each depends on changes (monkeypatch), and that
feature alone stands aside with its line, once per process; where a fit runs, its weights are stock
Lightning's. The promise keepers among them say they cannot stand aside."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_gpu import upstream as gate
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.resume.state import VAL_STEPS_KEY, LoggingStateCallback
from lit_gpu.upstream import FEATURES, detect_anomaly


def _fit(tmp_path, callbacks: list[pl.Callback]) -> RegressionModule:
    torch.manual_seed(0)
    module = RegressionModule(SimpleModel())
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=callbacks)  # fmt: skip
    trainer.fit(module, datamodule=SyntheticRegressionDataModule(num_samples=96, batch_size=32))
    return module


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _only_aside(*names: str) -> None:
    for other in FEATURES:
        assert (gate.problem(other) is None) == (other not in names), other


def _without(monkeypatch, module: Any, cls_name: str, name: str, keep: tuple[str, ...] = ()) -> None:
    """Lightning's ``module.cls_name`` as a release that no longer sets ``self.name`` would be: a subclass
    whose source has no such line (the names in ``keep`` stay, as class attributes)."""
    base = getattr(module, cls_name)
    changed = type(cls_name, (base,), dict.fromkeys(keep))
    changed.__module__ = __name__  # its source: this module's, without the name
    monkeypatch.setattr(module, cls_name, changed)


def _line(name: str) -> str:
    return f"{FEATURES[name].name} stands aside, {FEATURES[name].instead}: "


@pytest.fixture(autouse=True)
def _fresh_gate():
    gate.reset()
    yield
    gate.reset()


def test_the_validation_steps_stand_aside_without_the_seen_batches_counter(tmp_path, monkeypatch, capsys):
    from lightning.pytorch.loops import evaluation_loop

    kept = _fit(tmp_path / "kept", [LoggingStateCallback(), ModelCheckpoint(every_n_train_steps=1)])
    stock = _fit(tmp_path / "stock", [ModelCheckpoint(every_n_train_steps=1)])
    _without(monkeypatch, evaluation_loop, "_EvaluationLoop", "_seen_batches_per_dataloader", ("_has_run",))
    gate.reset()
    _only_aside("validation steps")
    gated = _fit(tmp_path / "gated", [LoggingStateCallback(), ModelCheckpoint(every_n_train_steps=1)])
    err = capsys.readouterr().err
    assert err.count(_line("validation steps")) == 1, err
    assert "it has no _EvaluationLoop" in err and err.count("stands aside") == 1
    assert _same_weights(stock, gated)
    saved = {
        run: torch.load(next((tmp_path / run).rglob("*.ckpt")), weights_only=False)
        for run in ("kept", "gated")
    }
    own = "LoggingStateCallback"  # its state_key: the counts live in its own state
    assert VAL_STEPS_KEY in saved["kept"]["callbacks"][own]
    assert VAL_STEPS_KEY not in saved["gated"]["callbacks"].get(own, {})  # not kept: they start from 0
    assert _same_weights(kept, gated)


def test_the_hook_name_stands_aside_without_current_fx_name(tmp_path, monkeypatch, capsys):
    from lightning.pytorch.core import module as lightning_module

    stock = _fit(tmp_path / "stock", [])
    _without(monkeypatch, lightning_module, "LightningModule", "_current_fx_name", ("_trainer",))
    gate.reset()
    _only_aside("hook name", "fast path")  # the lean step reads the name too
    gated = _fit(tmp_path / "gated", [])
    err = capsys.readouterr().err
    assert err.count(_line("hook name")) == 1, err
    assert _same_weights(stock, gated)


def test_the_anomaly_check_stands_aside_without_the_trainer_flag(monkeypatch, capsys):
    from lightning.pytorch.trainer import trainer as lightning_trainer

    keep = ("_logger_connector", "_data_connector", "_signal_connector", "_checkpoint_connector")
    _without(monkeypatch, lightning_trainer, "Trainer", "_detect_anomaly", keep)
    gate.reset()
    _only_aside("anomaly check")
    flagged = pl.Trainer(detect_anomaly=True, logger=False, enable_progress_bar=False)
    assert detect_anomaly(flagged) is False and detect_anomaly(flagged) is False  # the NaN guard runs
    assert capsys.readouterr().err.count(_line("anomaly check")) == 1


def test_the_allocator_setting_stands_aside_without_torch_s_setter(monkeypatch, capsys):
    from lit_gpu.upstream import set_allocator_settings

    calls: list[str] = []
    monkeypatch.delattr(torch._C, "_accelerator_setAllocatorSettings")
    monkeypatch.setattr(torch.cuda.memory, "_set_allocator_settings", calls.append)
    gate.reset()
    _only_aside("allocator setting")
    set_allocator_settings("expandable_segments:True")
    set_allocator_settings("expandable_segments:False")
    assert calls == []  # the allocator keeps its setting
    err = capsys.readouterr().err
    assert err.count(_line("allocator setting")) == 1 and "_accelerator_setAllocatorSettings" in err


@pytest.mark.parametrize(
    ("name", "module", "attr"),
    [
        ("interrupt", "torch.utils.data._utils.signal_handling", "_set_SIGCHLD_handler"),
        (
            "cluster resume",
            "lightning.pytorch.trainer.connectors.checkpoint_connector",
            "_CheckpointConnector",
        ),
        ("torch zip reader", "torch._C", "PyTorchFileReader"),
        ("config reading", "jsonargparse._optionals", "_get_config_read_mode"),
        ("sweep trial ids", "optuna.trial", "Trial"),
    ],
)
def test_a_promise_keeper_says_it_cannot_stand_aside(monkeypatch, capsys, name, module, attr):
    import importlib

    monkeypatch.delattr(importlib.import_module(module), attr)
    gate.reset()
    assert gate.problem(name) is not None
    assert gate.stands_aside(name) is False and gate.stands_aside(name) is False  # it keeps running
    promise = FEATURES[name].promise
    assert capsys.readouterr().err.count(f"it is the only way to keep {promise} (its test is the judge)") == 1
