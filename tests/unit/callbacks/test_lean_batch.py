"""LeanTrainingBatch: Lightning's per-batch loop glue with fewer layers, and nothing else changes."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger

from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.fastpath.batch import LeanTrainingBatch, lean_batch_blocker
from lit_gpu.fastpath.step import LeanOptimizerStep, SkipIdleHooks
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.trainers import quiet_trainer


class Recorder(Callback):
    """What callbacks can see around each batch: hook, hook name, indices, counters, metrics."""

    def __init__(self, stop_at: int | None = None, sigterm_at: int | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.lean_seen: list[bool] = []
        self.stop_at, self.sigterm_at = stop_at, sigterm_at

    def _metrics(self, trainer: pl.Trainer) -> tuple[Any, ...]:
        connector = trainer._logger_connector  # its caches too, not only what the properties recompute
        return tuple(
            sorted((k, round(float(v), 6)) for k, v in metrics.items())
            for metrics in (  # the caches first: reading the properties refreshes them
                dict(connector._callback_metrics),
                dict(connector._logged_metrics),
                dict(connector._progress_bar_metrics),
                trainer.progress_bar_metrics,
                trainer.callback_metrics,
            )
        )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.lean_seen.append("advance" in vars(trainer.fit_loop.epoch_loop))
        device = batch[0].device if isinstance(batch, (tuple, list, dict)) else None
        last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        self.calls.append(("start", pl_module._current_fx_name, batch_idx, trainer.global_step,
                           type(batch).__name__, str(device), last, self._metrics(trainer)))  # fmt: skip

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else None
        kept = None if loss is None else round(float(loss), 6)
        self.calls.append(("end", pl_module._current_fx_name, batch_idx, trainer.global_step, kept,
                           self._metrics(trainer)))  # fmt: skip
        step = trainer.global_step
        if self.stop_at is not None and step == self.stop_at:
            trainer.should_stop = True
        if self.sigterm_at is not None and step == self.sigterm_at:
            trainer._signal_connector.received_sigterm = True

    def on_validation_start(self, trainer, pl_module) -> None:
        self.calls.append(("validate", trainer.global_step, trainer.fit_loop.epoch_loop.batch_idx))


class RecordingLogger(Logger):
    """Every ``log_metrics`` call the loggers get: what is written and at which step."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[int | None, list[tuple[str, float]]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.records.append((step, sorted((k, round(float(v), 6)) for k, v in metrics.items())))


class Module(RegressionModule):
    """Logs in its step, can end an epoch early (``on_train_batch_start`` returning -1) and use schedulers."""

    def __init__(self, end_epoch_at: int | None = None, scheduler: str | None = None) -> None:
        factories = {
            "step": (lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2, 0.5), "step"),
            "plateau": (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0), "epoch"),
            "plateau-step": (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0), "step"),
            "onecycle": (lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=40), "step"),
            None: (None, "epoch"),
        }
        factory, interval = factories[scheduler]
        super().__init__(SimpleModel(), scheduler=factory, scheduler_interval=interval)
        self.end_epoch_at = end_epoch_at

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        self.log("inside/train", loss.detach(), on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
        super().on_train_batch_start(batch, batch_idx)
        if self.end_epoch_at is not None and self.current_epoch == 0 and batch_idx == self.end_epoch_at:
            return -1
        return None


def _data(n: int = 48) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(n, 10, generator=g), torch.randn(n, 10, generator=g))


def _as_list(items: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    return [torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])]


def _as_dict(items: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[int, torch.Tensor]:
    return {0: torch.stack([x for x, _ in items]), 1: torch.stack([y for _, y in items])}


COLLATES = {"tuple": None, "list": _as_list, "dict": _as_dict}


def _fit(
    tmp_path,
    lean: bool,
    module_kwargs: dict | None = None,
    collate: str = "tuple",
    recorder: Recorder | None = None,
    ckpt_path: str | None = None,
    callbacks: tuple[Callback, ...] = (),
    loaders: Any = None,
    module_cls: type = None,
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    pl.seed_everything(0)
    module = (module_cls or Module)(**(module_kwargs or {}))
    recorder = recorder or Recorder()
    batch = LeanTrainingBatch()
    lean_callbacks = [LeanOptimizerStep(), batch] if lean else []
    logger = RecordingLogger()
    trainer_kwargs = {"max_epochs": 2, "log_every_n_steps": 2, "logger": logger, **trainer_kwargs}
    trainer = quiet_trainer(
        tmp_path,
        callbacks=[SkipIdleHooks(), NaNGuard(), recorder, *callbacks, *lean_callbacks],
        **trainer_kwargs,
    )
    train = (
        loaders()
        if loaders
        else torch.utils.data.DataLoader(_data(), batch_size=8, collate_fn=COLLATES[collate])
    )
    val = torch.utils.data.DataLoader(_data(16), batch_size=8)
    outcome = "finished"
    try:
        trainer.fit(module, train_dataloaders=train, val_dataloaders=val, ckpt_path=ckpt_path)
    except BaseException as err:  # noqa: BLE001 - the SIGTERM case: both runs must end the same way
        outcome = type(err).__name__
    return {
        "outcome": outcome,
        "weights": module.state_dict(),
        "loops": trainer.fit_loop.state_dict(),
        "global_step": trainer.global_step,
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
        "metrics": Recorder()._metrics(trainer),
        "logged": sorted((k, round(float(v), 6)) for k, v in trainer.logged_metrics.items()),
        "records": logger.records,
        "calls": recorder.calls,
        "lean_seen": recorder.lean_seen,
        "blocker": batch.blocker,
        "left_behind": [
            k for k in ("run", "advance", "on_advance_end") if k in vars(trainer.fit_loop.epoch_loop)
        ]
        + ["results.log"] * ("log" in vars(trainer.fit_loop.epoch_loop._results)),
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["outcome"] == b["outcome"]
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])
    assert a["loops"] == b["loops"]  # progress counters: global_step, checkpoints and resume read them
    assert (a["global_step"], a["lr"], a["metrics"], a["logged"]) == (b["global_step"], b["lr"], b["metrics"],
                                                                        b["logged"])  # fmt: skip
    assert a["records"] == b["records"]  # what the loggers wrote, at which steps
    assert a["calls"] == b["calls"]  # same hooks, order, fx name, indices, counters, batches and metrics


CASES = [
    pytest.param({}, {}, id="plain"),
    pytest.param({}, {"val_check_interval": 2}, id="validation-every-2-batches"),
    pytest.param({}, {"val_check_interval": 0.5}, id="validation-twice-an-epoch"),
    pytest.param(
        {}, {"val_check_interval": 4, "check_val_every_n_epoch": None}, id="validation-across-epochs"
    ),
    pytest.param({}, {"limit_val_batches": 0}, id="no-validation"),
    pytest.param({"scheduler": "step"}, {}, id="step-lr-scheduler"),
    pytest.param({"scheduler": "plateau"}, {}, id="plateau-lr-scheduler"),
    pytest.param({"scheduler": "plateau-step"}, {"val_check_interval": 1}, id="plateau-every-step"),
    pytest.param({"scheduler": "onecycle"}, {"val_check_interval": 3}, id="onecycle-every-step"),
    pytest.param({"end_epoch_at": 3}, {}, id="on_train_batch_start-returns-minus-1"),
    pytest.param({}, {"accumulate_grad_batches": 2}, id="accumulation"),
    pytest.param({}, {"max_steps": 5}, id="max_steps-mid-epoch"),
    pytest.param({}, {"precision": "bf16-mixed"}, id="bf16-mixed"),
    pytest.param({}, {"log_every_n_steps": 0}, id="no-step-logging"),
    pytest.param({}, {"fast_dev_run": 3}, id="fast_dev_run"),
]


@pytest.mark.parametrize(("module_kwargs", "trainer_kwargs"), CASES)
def test_the_lean_batch_trains_exactly_as_lightnings_loop(tmp_path, module_kwargs, trainer_kwargs):
    lean = _fit(tmp_path, True, module_kwargs, **trainer_kwargs)
    plain = _fit(tmp_path, False, module_kwargs, **trainer_kwargs)
    assert lean["blocker"] is None and all(lean["lean_seen"]) and lean["lean_seen"]
    assert not any(plain["lean_seen"])
    _same(lean, plain)
    assert lean["left_behind"] == []  # the epoch loop has Lightning's own methods again


@pytest.mark.parametrize("collate", ["list", "dict"])
def test_other_batch_collections_move_as_lightning_moves_them(tmp_path, collate):
    _same(_fit(tmp_path, True, collate=collate), _fit(tmp_path, False, collate=collate))


@pytest.mark.parametrize(
    "recorder", [Recorder(stop_at=3), Recorder(sigterm_at=2)], ids=["should_stop", "sigterm"]
)
def test_a_stop_or_sigterm_mid_epoch_ends_the_fit_as_lightning_ends_it(tmp_path, recorder):
    kind = {"stop_at": recorder.stop_at, "sigterm_at": recorder.sigterm_at}
    lean = _fit(tmp_path, True, recorder=recorder)
    plain = _fit(tmp_path, False, recorder=Recorder(**kind))
    _same(lean, plain)
    assert lean["global_step"] < 12


def test_resuming_mid_epoch_runs_the_same_batches(tmp_path):
    saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1)
    _fit(tmp_path, False, callbacks=(saver,), enable_checkpointing=True)
    ckpt = str(tmp_path / "ckpt" / "epoch=0-step=3.ckpt")
    lean = _fit(tmp_path, True, ckpt_path=ckpt, enable_checkpointing=True)
    plain = _fit(tmp_path, False, ckpt_path=ckpt, enable_checkpointing=True)
    _same(lean, plain)
    assert lean["global_step"] == 12 and len(lean["lean_seen"]) == 9 and lean["lean_seen"][1:] == [True] * 8


class OwnTransfer(Module):
    """Every transfer hook its own: scales inputs before, moves them itself, and shifts them after."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str | None]] = []

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.seen.append(("before", self._current_fx_name))
        return (batch[0] * 2, batch[1]) if self.trainer.training else batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.seen.append(("transfer", self._current_fx_name))
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.seen.append(("after", self._current_fx_name))
        return (batch[0] + 1, batch[1]) if self.trainer.training else batch


def test_a_modules_own_transfer_hooks_run_in_the_lean_batch_as_in_lightnings(tmp_path):
    seen = {}

    class Keep(Callback):
        def on_train_end(self, trainer, pl_module) -> None:
            seen[len(seen)] = list(pl_module.seen)

    lean = _fit(tmp_path, True, module_cls=OwnTransfer, callbacks=(Keep(),))
    plain = _fit(tmp_path, False, module_cls=OwnTransfer, callbacks=(Keep(),))
    _same(lean, plain)
    assert lean["blocker"] is None and all(lean["lean_seen"])
    assert seen[0] == seen[1] and ("after", "on_after_batch_transfer") in seen[0]


def test_a_data_modules_gpu_style_normalization_runs_in_the_lean_batch(tmp_path):
    from lit_gpu.data import SyntheticImageDataModule
    from lit_gpu.modules import ClassificationModule

    def fit(lean: bool) -> tuple[Any, ...]:
        pl.seed_everything(0)
        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 6 * 6, 4))
        module = ClassificationModule(net, num_classes=4)
        batch = LeanTrainingBatch()
        shapes: list[tuple[torch.dtype, float]] = []

        class Look(Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
                shapes.append((batch[0].dtype, round(float(batch[0].mean()), 6)))

        callbacks = [Look(), *([LeanOptimizerStep(), batch] if lean else [])]
        trainer = quiet_trainer(tmp_path, max_steps=4, limit_val_batches=0, callbacks=callbacks)
        data = SyntheticImageDataModule(
            num_samples=32, num_classes=4, image_size=6, batch_size=8, num_workers=0
        )
        trainer.fit(module, datamodule=data)
        return batch.blocker, shapes, module.state_dict()

    lean, plain = fit(True), fit(False)
    assert lean[0] is None and lean[1] == plain[1] and {dtype for dtype, _ in lean[1]} == {torch.float32}
    for key, value in lean[2].items():
        assert torch.equal(value, plain[2][key]), key


class Manual(Module):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt = self.optimizers()
        loss = self.compute_loss(self(batch[0]), batch[1])
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss


@pytest.mark.parametrize(
    ("module_cls", "trainer_kwargs", "blocker"),
    [
        (Module, {"profiler": "simple"}, "profiler SimpleProfiler"),
        (Module, {"precision": "bf16-true"}, "precision plugin HalfPrecision converts inputs"),
        (Manual, {}, "manual optimization"),
    ],
)
def test_anything_the_lean_batch_does_not_cover_runs_lightnings_loop(
    tmp_path, module_cls, trainer_kwargs, blocker
):
    seen: list[str | None] = []

    class Look(Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            seen.append(lean_batch_blocker(trainer, pl_module))

    pl.seed_everything(0)
    step = LeanTrainingBatch()
    trainer = quiet_trainer(tmp_path, max_steps=2, callbacks=[Look(), step], **trainer_kwargs)
    trainer.fit(module_cls(), train_dataloaders=torch.utils.data.DataLoader(_data(), batch_size=8))
    assert step.blocker == blocker == seen[0]
    assert "advance" not in vars(trainer.fit_loop.epoch_loop)


def test_another_lightning_loop_source_makes_it_stand_aside(tmp_path, monkeypatch):
    from lit_gpu import upstream as gate
    from lit_gpu.upstream import DIGESTS

    gate.reset()
    assert gate.problem("fast path") is None  # the installed Lightning is mirrored
    advance = "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop.advance"
    monkeypatch.setitem(DIGESTS, advance, "another")
    gate.reset()
    step = LeanTrainingBatch()
    quiet_trainer(tmp_path, max_steps=1, callbacks=[step]).fit(
        Module(), train_dataloaders=torch.utils.data.DataLoader(_data(), batch_size=8)
    )
    assert step.blocker is not None
    assert "_TrainingEpochLoop.advance differs from the code lit_gpu mirrors" in step.blocker
    gate.reset()


def test_a_step_scheduler_keeps_the_batch_end_lean(tmp_path, monkeypatch):
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    from lit_gpu import upstream as gate

    # the digests are checked (and cached) before the class method is wrapped below
    gate.reset()
    assert gate.problem("fast path") is None
    handed_over: list[int] = []
    original = _TrainingEpochLoop.on_advance_end

    def counting(self: Any, data_fetcher: Any) -> None:
        handed_over.append(self.batch_progress.current.ready)
        return original(self, data_fetcher)

    monkeypatch.setattr(_TrainingEpochLoop, "on_advance_end", counting)
    result = _fit(tmp_path, True, {"scheduler": "onecycle"}, val_check_interval=3)
    assert result["global_step"] == 12 and result["blocker"] is None
    # only the batches after which validation may run go to Lightning: 3 and 6 (the last) of each epoch
    assert handed_over == [3, 6, 3, 6]


class LogsOncePerEpoch(RegressionModule):
    """Shows a progress-bar value logged on the first batch of each epoch only."""

    def __init__(self) -> None:
        super().__init__(SimpleModel())

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        if batch_idx == 0:
            self.log("first/loss", loss.detach() * 1.0, on_step=True, on_epoch=False, prog_bar=True)
        return loss


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "lightning"])
def test_a_progress_bar_value_is_converted_once_per_log_not_once_per_batch(tmp_path, monkeypatch, lean):
    """Lightning ``.item()``s every progress-bar value after every batch (on a GPU a host-device sync per
    step); the lean batch converts a logged tensor once and shows the same number until the next log."""
    from lightning.fabric.utilities import apply_func

    converted: list[float] = []
    original = apply_func.convert_tensors_to_scalars

    def counting(data: Any) -> Any:
        if isinstance(data, torch.Tensor):
            converted.append(round(float(data), 6))
        return original(data)

    monkeypatch.setattr(apply_func, "convert_tensors_to_scalars", counting)
    if not lean:  # Lightning's result collection imported the function by name
        from lightning.pytorch.trainer.connectors.logger_connector import result

        monkeypatch.setattr(result, "convert_tensors_to_scalars", counting)
    shown: list[float] = []

    class Shown(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            # what on_batch_end hands the progress bar is set after this hook: read the previous batch's
            shown.append(trainer._logger_connector._progress_bar_metrics.get("first/loss"))

    batch = LeanTrainingBatch()
    callbacks = [LeanOptimizerStep(), batch] if lean else []
    trainer = quiet_trainer(
        tmp_path, callbacks=[Shown(), *callbacks], max_epochs=2, log_every_n_steps=0, logger=False
    )
    pl.seed_everything(0)
    trainer.fit(LogsOncePerEpoch(), torch.utils.data.DataLoader(_data(), batch_size=8))
    assert batch.blocker is None
    assert len(shown) == 12 and shown[0] is None and shown[1] is not None
    epoch_values = [round(shown[1], 6), round(shown[7], 6)]
    assert shown[1:6] == [shown[1]] * 5 and shown[7:] == [shown[7]] * 5
    assert trainer._logger_connector._progress_bar_metrics["first/loss"] == shown[7]
    # one conversion per logged value (lean) against one per batch (Lightning's own loop)
    assert converted == (epoch_values if lean else [epoch_values[0]] * 6 + [epoch_values[1]] * 6)


class Unsized(torch.utils.data.IterableDataset):
    """The same samples as ``_data()``, from a dataset without a length."""

    def __iter__(self) -> Any:
        yield from _data()


LOADERS = {
    "no-length": lambda: torch.utils.data.DataLoader(Unsized(), batch_size=8),
    "two-loaders": lambda: {
        0: torch.utils.data.DataLoader(_data(), batch_size=8),
        1: torch.utils.data.DataLoader(_data(32), batch_size=8),
    },
    "list-of-one": lambda: [torch.utils.data.DataLoader(_data(), batch_size=8)],
}


class TakesLoaders(Module):
    """Trains on the first loader's batch of a collection of loaders (or on the batch itself)."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if isinstance(batch, dict) or isinstance(batch, list) and isinstance(batch[0], (list, tuple)):
            batch = batch[0]
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("loaders", LOADERS.values(), ids=LOADERS.keys())
def test_loaders_the_lean_fetch_leaves_to_lightnings_fetcher_train_the_same(tmp_path, loaders):
    """The lean fetch takes batches straight from one sized loader; a loader without a length (Lightning
    prefetches a batch to know the last) and collections of loaders go through Lightning's fetcher."""
    lean = _fit(tmp_path, True, loaders=loaders, module_cls=TakesLoaders)
    plain = _fit(tmp_path, False, loaders=loaders, module_cls=TakesLoaders)
    assert lean["blocker"] is None and all(lean["lean_seen"])
    _same(lean, plain)
    assert lean["left_behind"] == []


def test_a_value_logged_again_is_not_moved_to_the_device_it_is_on(tmp_path, monkeypatch):
    """Lightning's ``results.log`` moves the stored metric to the value's device at every call (a walk
    over its whole ``__dict__``, ~600 Python calls); the lean batch moves it once, when it is made."""
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

    moved: list[str] = []
    original = _ResultMetric.to

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        moved.append(self.meta.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(_ResultMetric, "to", counting)
    counts = {}
    for lean in (True, False):
        moved.clear()
        result = _fit(tmp_path, lean, max_epochs=1, limit_val_batches=0)
        counts[lean] = (moved.count("inside/train"), moved.count("train/loss_step"), result["records"])
    # 6 batches: "inside/train" logged at each, "train/loss_step" at the log steps (2, 4, 6); both also
    # moved to the CPU at teardown, in either loop
    assert counts[False][0] - counts[True][0] == 5 and counts[False][1] - counts[True][1] == 2
    assert counts[True][2] == counts[False][2]  # what the loggers got


class LogsTwoWays(Module):
    """Logs one key with other arguments at its second batch: a mistake Lightning names."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        self.log("twice", loss.detach(), on_step=True, on_epoch=False, prog_bar=batch_idx == 1)
        return loss


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "lightning"])
def test_a_key_logged_again_with_other_arguments_is_still_lightnings_error(tmp_path, lean):
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    trainer = quiet_trainer(
        tmp_path, max_steps=3, callbacks=[LeanOptimizerStep(), LeanTrainingBatch()] if lean else []
    )
    with pytest.raises(MisconfigurationException, match="twice"):
        trainer.fit(LogsTwoWays(), torch.utils.data.DataLoader(_data(), batch_size=8))


def test_a_batch_that_logged_nothing_reuses_the_last_step_metrics(tmp_path, monkeypatch):
    """Lightning rebuilds the step metrics from the result collection after every batch; the lean batch
    rebuilds them only after a batch that logged (here the first of each epoch)."""
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection

    calls = {True: 0, False: 0}
    original = _ResultCollection.valid_items
    state = {"lean": True}

    def counting(self: Any) -> Any:
        calls[state["lean"]] += 1
        return original(self)

    monkeypatch.setattr(_ResultCollection, "valid_items", counting)
    for lean in (True, False):
        state["lean"] = lean
        pl.seed_everything(0)
        trainer = quiet_trainer(
            tmp_path,
            callbacks=[LeanOptimizerStep(), LeanTrainingBatch()] if lean else [],
            max_epochs=2,
            log_every_n_steps=0,
            logger=False,
        )
        trainer.fit(LogsOncePerEpoch(), torch.utils.data.DataLoader(_data(), batch_size=8))
    # 12 batches: Lightning reads the collection after each; the lean batch after the 2 that logged
    assert calls[False] - calls[True] == 10
