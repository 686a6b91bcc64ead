"""The gate, feature by feature: one upstream function or name each feature depends on changed (monkeypatch),
and that feature, and only it, stands aside with its line, once per process; the fit's weights are stock
Lightning's. A feature that cannot stand aside says so in its line and keeps running."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_gpu import upstream as gate
from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.cli.lightning_cli import DEFAULT_CALLBACKS
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.upstream import FEATURES

_EPOCH = "lightning.pytorch.loops.training_epoch_loop"
_LOGGER = "lightning.pytorch.trainer.connectors.logger_connector.logger_connector"


def _fit(tmp_path, callbacks: list[pl.Callback], **kwargs: Any) -> RegressionModule:
    torch.manual_seed(0)
    module = RegressionModule(SimpleModel())
    args = dict(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                enable_model_summary=False, default_root_dir=tmp_path, callbacks=callbacks)  # fmt: skip
    args.update(kwargs)
    pl.Trainer(**args).fit(module, datamodule=SyntheticRegressionDataModule(num_samples=96, batch_size=32))
    return module


def _defaults() -> list[pl.Callback]:
    return [cls() for cls in DEFAULT_CALLBACKS] + [SpeedLevers()]


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _changed_source(cls: type, name: str) -> Any:
    """``cls.name`` with another source (a Lightning release that changed it), the same behaviour."""
    original = cls.__dict__[name]
    if isinstance(original, property):
        return property(lambda self: original.fget(self))

    def changed(self, *args, **kwargs):  # another source (and signature)
        return original(self, *args, **kwargs)

    return changed


def _only_aside(*names: str) -> None:
    for other in FEATURES:
        assert (gate.problem(other) is None) == (other not in names), other


# feature -> (class, name, where the change shows in the line)
CHANGES = {
    "fast path": (f"{_EPOCH}:_TrainingEpochLoop", "on_advance_end", "on_advance_end differs"),
    "fresh last": (
        "lightning.pytorch.callbacks.model_checkpoint:ModelCheckpoint",
        "_should_skip_saving_checkpoint",
        "ModelCheckpoint._should_skip_saving_checkpoint takes (self, *args, **kwargs)",
    ),
    "step log check": (f"{_LOGGER}:_LoggerConnector", "should_update_logs", "should_update_logs differs"),
}  # fmt: skip
#: features that mirror the same function stand aside together: the lean batch mirrors it too
ALSO = {"step log check": ("fast path",), "exact resume": ("loader replay",)}


def _resolve(where: str) -> type:
    return gate.resolve(where)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_changed_dependency_makes_that_feature_alone_stand_aside(tmp_path, monkeypatch, capsys, name):
    stock = _fit(tmp_path / "stock", [ModelCheckpoint(save_last=True)])
    where, attr, shown = CHANGES[name]
    cls = _resolve(where)
    monkeypatch.setattr(cls, attr, _changed_source(cls, attr))
    gate.reset()
    _only_aside(name, *ALSO.get(name, ()))
    callbacks = [*_defaults(), FreshLastCheckpoint(save_last=True, every_n_train_steps=2)]
    gated = _fit(tmp_path / "gated", callbacks)
    _fit(tmp_path / "again", [*_defaults(), FreshLastCheckpoint(save_last=True)])  # a second fit: no new line
    err = capsys.readouterr().err
    line = f"{FEATURES[name].name} stands aside, {FEATURES[name].instead}: "
    assert err.count(line) == 1 and shown in err, err
    assert err.count("stands aside") == 1 + len(ALSO.get(name, ()))  # no other feature's line
    assert _same_weights(stock, gated)
    gate.reset()


def test_the_logging_state_stands_aside_on_another_result_metric(tmp_path, monkeypatch, capsys):
    from lightning.pytorch.trainer.connectors.logger_connector import result

    original = result._ResultMetric.__init__

    def changed(self, metadata, is_tensor, extra=None):  # another signature
        original(self, metadata, is_tensor)

    monkeypatch.setattr(result._ResultMetric, "__init__", changed)
    gate.reset()
    _only_aside("logging state")
    stock = _fit(tmp_path / "stock", [ModelCheckpoint(every_n_train_steps=1)])
    mid_epoch = ModelCheckpoint(every_n_train_steps=1)  # saves inside the epoch: the state is captured
    gated = _fit(tmp_path / "gated", [*_defaults(), mid_epoch])
    err = capsys.readouterr().err
    assert err.count(f"{FEATURES['logging state'].name} stands aside, they start afresh") == 1, err
    assert "_ResultMetric.__init__ takes" in err and _same_weights(stock, gated)
    gate.reset()


def test_the_capture_stands_aside_on_a_torch_it_was_not_verified_on(monkeypatch, capsys):
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    gate.reset()
    _only_aside("capture")
    assert gate.stands_aside("capture") and gate.stands_aside("capture")
    err = capsys.readouterr().err
    assert (
        err.count("whole-step capture (speed.cuda_graph) stands aside, steps run as usual: torch 2.99.0") == 1
    )
    gate.reset()


def test_the_cli_builds_every_subcommand_parser_on_another_add_subcommands(tmp_path, monkeypatch, capsys):
    from lightning.pytorch.cli import LightningCLI

    from lit_gpu.cli import LitGpuCLI
    from tests.helpers.paths import CONFIGS

    built: list[str] = []
    original = LightningCLI._add_subcommands

    def changed(self, parser, **kwargs):  # another source: counts the parsers it builds
        built.extend(self.subcommands())
        return original(self, parser, **kwargs)

    monkeypatch.setattr(LightningCLI, "_add_subcommands", changed)
    monkeypatch.chdir(tmp_path)
    gate.reset()
    _only_aside("one-subcommand parse")
    with pytest.raises(SystemExit):  # --print_config: parsed, printed, nothing trained
        LitGpuCLI(args=["fit", "--config", str(CONFIGS / "simple.yaml"), "--print_config"])
    assert built == ["fit", "validate", "test", "predict"]  # Lightning's own: every parser
    assert "the CLI's one-subcommand parser stands aside" in capsys.readouterr().err
    gate.reset()


@pytest.mark.parametrize(
    ("name", "where", "attr"),
    [
        ("exact resume", "lightning.pytorch.loops.fit_loop:_FitLoop", "_load_combined_loader_states"),
        (
            "removal guard",
            "lightning.pytorch.callbacks.model_checkpoint:ModelCheckpoint",
            "_remove_checkpoint",
        ),
        ("dp", "lightning.pytorch.strategies.strategy:Strategy", "_setup_model"),
        ("config decides", "lightning.pytorch.cli:LightningCLI", "_parse_ckpt_path"),
    ],
)
def test_a_feature_that_keeps_a_promise_says_it_cannot_stand_aside(monkeypatch, capsys, name, where, attr):
    cls = gate.resolve(where)
    monkeypatch.setattr(cls, attr, _changed_source(cls, attr))
    gate.reset()
    _only_aside(name, *ALSO.get(name, ()))
    assert gate.stands_aside(name) is False and gate.stands_aside(name) is False  # it keeps running
    err = capsys.readouterr().err
    promise = FEATURES[name].promise
    assert (
        err.count(f"it cannot stand aside: it is the only way to keep {promise} (its test is the judge)") == 1
    )
    assert f"{attr} takes (self, *args, **kwargs)" in err
    gate.reset()


def test_a_lightning_newer_than_verified_makes_every_feature_stand_aside_or_say_so(monkeypatch):
    import lightning

    monkeypatch.setattr(lightning, "__version__", "2.99.0")
    gate.reset()
    for name in FEATURES:
        assert (
            gate.problem(name)
            == f"Lightning 2.99.0 is newer than {gate.VERIFIED_UP_TO}, the newest it was verified on"
        )
    gate.reset()


def test_every_feature_is_verified_on_the_installed_lightning():
    gate.reset()
    assert {name: gate.problem(name) for name in FEATURES} == dict.fromkeys(FEATURES)
