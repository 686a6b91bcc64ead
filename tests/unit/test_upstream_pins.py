"""Pins of the upstream private APIs lit_gpu still relies on: one test per API, named after it.

When a Lightning or jsonargparse upgrade changes one of them, the test named after it fails first and says
which lit_gpu code to revisit. Public APIs replaced the others (``fsspec.utils.get_protocol`` for local
paths, ``MPSAccelerator``/``XLAAccelerator.is_available`` for ``accelerator: auto``, the documented
``JSONARGPARSE_DEBUG`` variable).
"""

from __future__ import annotations

import csv

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ThroughputMonitor
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.trainer.states import RunningStage

from lit_gpu.cli.trainer import allow_auto_precision
from lit_gpu.strategies import DataParallelStrategy
from tests.helpers.dp import dp_data, dp_module
from tests.helpers.trainers import quiet_trainer


def test_model_checkpoint__save_topk_checkpoint__save_last_checkpoint__last_global_step_saved(tmp_path):
    """lit_gpu.callbacks.FreshLastCheckpoint extends both hooks and reads ``_last_global_step_saved``."""
    calls: list[tuple[str, int, bool]] = []

    class Recording(ModelCheckpoint):
        def _save_topk_checkpoint(self, trainer, monitor_candidates):
            super()._save_topk_checkpoint(trainer, monitor_candidates)
            calls.append(("topk", trainer.global_step, "val/loss" in monitor_candidates))
            assert self._last_global_step_saved in (trainer.global_step, 0)

        def _save_last_checkpoint(self, trainer, monitor_candidates):
            calls.append(("last", trainer.global_step, isinstance(monitor_candidates, dict)))
            super()._save_last_checkpoint(trainer, monitor_candidates)

    cb = Recording(dirpath=tmp_path, monitor="val/loss", save_last=True)
    trainer = quiet_trainer(
        tmp_path,
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=1,
        callbacks=[cb],
        enable_checkpointing=True,
    )
    trainer.fit(dp_module(), dp_data())
    assert ("topk", 3, True) in calls and ("topk", 6, True) in calls
    assert ("last", 6, True) in calls and (tmp_path / "last.ckpt").is_file()
    assert cb._last_global_step_saved == 6


def test_trainer__logger_connector_should_update_logs(tmp_path):
    """lit_gpu.modules.LitModule logs ``train/loss_step`` only on the steps Lightning's loggers record."""
    flags: dict[int, bool] = {}

    class Probe(BoringModel):
        def training_step(self, batch, batch_idx):
            flags[self.trainer.global_step] = self.trainer._logger_connector.should_update_logs
            out = super().training_step(batch, batch_idx)
            self.log("probe", float(self.trainer.global_step), on_step=True, on_epoch=False)
            return out

    logger = CSVLogger(tmp_path, name="pin", version=0)
    trainer = quiet_trainer(tmp_path, max_steps=7, log_every_n_steps=3, logger=logger, limit_val_batches=0)
    trainer.fit(Probe())
    with open(tmp_path / "pin" / "version_0" / "metrics.csv") as f:
        logged = {round(float(row["probe"])) for row in csv.DictReader(f) if row.get("probe")}
    assert logged == {step for step, flag in flags.items() if flag}
    assert logged and len(logged) < len(flags)


def test_strategy__configure_launcher__setup_model(tmp_path):
    """DataParallelStrategy checks devices in ``_configure_launcher``, wraps the net in ``_setup_model``."""
    seen: dict[str, object] = {}

    class Recording(DataParallelStrategy):
        def _configure_launcher(self) -> None:
            seen["devices_at_launcher"] = list(self.parallel_devices or [])
            super()._configure_launcher()

        def _setup_model(self, model):
            seen["setup_model"] = type(model).__name__
            return super()._setup_model(model)

    trainer = quiet_trainer(tmp_path, strategy=Recording(), max_steps=1, limit_val_batches=0)
    assert seen["devices_at_launcher"] == [torch.device("cpu")]  # called in Trainer() with devices set
    trainer.fit(dp_module(), dp_data())
    assert seen["setup_model"] == "RegressionModule"


def test_throughput_monitor__compute__throughputs__samples__batches(tmp_path):
    """lit_gpu.commands.bench reads the rates from ``_throughputs`` in its ``_compute`` override."""
    rates: list[dict[str, float]] = []

    class Probe(ThroughputMonitor):
        def _compute(self, trainer, iter_num=None):
            if trainer.state.stage == RunningStage.TRAINING:
                rates.append(
                    {k: float(v) for k, v in self._throughputs[trainer.state.stage].compute().items()}
                )

    monitor = Probe(batch_size_fn=lambda batch: len(batch[0]), window_size=2)
    trainer = quiet_trainer(tmp_path, max_steps=4, limit_val_batches=0, callbacks=[monitor])
    trainer.fit(dp_module(), dp_data())
    assert rates and rates[-1]["device/samples_per_sec"] > 0
    assert monitor._samples[RunningStage.TRAINING] == 4 * 16 and monitor._batches[RunningStage.TRAINING] == 4


def test_hparams_mixin__given_hyperparameters():
    """lit_gpu.checkpoints.net_spec reads the CLI's ``net`` config while LightningCLI builds the module."""
    from lit_gpu.cli import LitGpuCLI
    from tests.helpers.paths import CONFIGS

    cli = LitGpuCLI(
        args=["--config", str(CONFIGS / "foonet.yaml"), "--model.net.init_args.layers", "4"],
        run=False,
    )
    assert cli.model.net_spec["class_path"] == "lit_gpu.nets.FooNet"
    assert cli.model.net_spec["init_args"]["layers"] == 4


def test_jsonargparse_action__typehint():
    """lit_gpu.cli.trainer.allow_auto_precision widens ``trainer.precision``'s ``_typehint`` to auto."""
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(pl.Trainer, "trainer")
    allow_auto_precision(parser)
    assert parser.parse_args(["--trainer.precision", "auto"]).trainer.precision == "auto"
    assert parser.parse_args(["--trainer.precision", "bf16-mixed"]).trainer.precision == "bf16-mixed"
