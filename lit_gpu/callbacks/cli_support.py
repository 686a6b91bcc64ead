"""What ``lit-gpu`` adds around LightningCLI for robust runs (kept here so ``cli.py`` stays thin).

* ``--ckpt_path last`` finds the newest ``last.ckpt`` of earlier runs (a new run logs to a new
  ``version_N`` folder, where Lightning alone would not look); other paths are checked up front.
* Atomic checkpoint writes, RNG state in checkpoints, a checkpoint on Ctrl+C, and the NaN guard.
* ``predict --predict_out FILE.csv`` writes predictions; ``fit --tune_batch_size true`` runs
  Lightning's batch-size finder before training.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from jsonargparse import Namespace
from jsonargparse._common import debug_mode_active
from lightning.pytorch.cli import LightningArgumentParser

from lit_gpu.callbacks.interrupt import CheckpointOnInterrupt
from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.callbacks.prediction_writer import CSVPredictionWriter
from lit_gpu.callbacks.rng_state import RNGStateCallback
from lit_gpu.checkpoints import check_checkpoint_file, find_last_checkpoint
from lit_gpu.io import install_atomic_checkpoint_io

_SPECIAL_CKPT = ("best", "last", "hpc", "registry")


def concise_parse_error(message: str, prog: str) -> str:
    """One line from jsonargparse's multi-line error: the key, what was expected, what was given."""
    lines = [ln.strip().lstrip("- ").strip() for ln in message.splitlines() if ln.strip()]
    if not lines:
        return f"invalid arguments; run '{prog} --help' for the options"
    keep = [lines[0].rstrip(":")]
    expected = sorted({ln for ln in lines[1:] if ln.startswith("Expected")})
    if expected:
        keep.append(" or ".join(expected))
    keep.extend(ln for ln in lines[1:] if ln.startswith("Given value:"))
    if len(keep) == 1 and len(lines) > 1:
        keep.append(lines[-1])
    text = re.sub(r"<class '([\w.]+)'>", r"\1", "; ".join(keep))
    return text + f"; run '{prog} --help' for the options"


class ConciseErrorParser(LightningArgumentParser):
    """Prints a bad config key or value as one ``lit-gpu: error:`` line (exit 2), not a usage wall."""

    def error(self, message: str, ex: Exception | None = None):  # type: ignore[override]
        if not self.exit_on_error or debug_mode_active():
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        print(f"lit-gpu: error: {concise_parse_error(message, prog)}", file=sys.stderr, flush=True)
        sys.exit(2)


def add_arguments(parser: LightningArgumentParser) -> None:
    """Add the ``nan_guard`` group, ``--predict_out`` and ``--tune_batch_size``."""
    parser.add_lightning_class_args(NaNGuard, "nan_guard")
    parser.add_argument(
        "--predict_out",
        type=str | None,
        default="predictions.csv",
        help="predict only: CSV file for the predictions (index,prediction,probability for classifiers)",
    )
    parser.add_argument(
        "--tune_batch_size",
        type=bool,
        default=False,
        help="fit only: find the largest data.batch_size that fits in memory (Lightning's Tuner) first",
    )


def _get(config: Any, key: str, default: Any = None) -> Any:
    try:
        value = config[key]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def _checkpoint_dirs(config: Namespace) -> list[str]:
    """Glob patterns of folders where this config's runs keep checkpoints."""
    dirpath = _get(config, "checkpoint.dirpath")
    if dirpath:
        return [str(dirpath)]
    patterns = []
    logger = _get(config, "trainer.logger")
    init = _get(logger, "init_args") if isinstance(logger, Namespace | dict) else None
    if init is not None:
        save_dir, name = _get(init, "save_dir", "runs"), _get(init, "name", "lit_gpu")
        patterns.append(str(Path(save_dir) / (name or "") / "version_*" / "checkpoints"))
    else:  # the CLI's default logger (also when this run itself logs nothing, e.g. `test`)
        patterns.append(str(Path("runs") / "lit_gpu" / "version_*" / "checkpoints"))
    root = _get(config, "trainer.default_root_dir") or "."
    patterns.append(str(Path(root) / "checkpoints"))
    return patterns


def resolve_ckpt_path(config: Namespace) -> None:
    """Turn ``ckpt_path: last`` into the newest earlier ``last.ckpt`` and sanity-check real paths."""
    subcommand = _get(config, "subcommand")
    if not subcommand:
        return
    key = f"{subcommand}.ckpt_path"
    ckpt_path = _get(config, key)
    if not ckpt_path:
        return
    if ckpt_path == "last":
        last = find_last_checkpoint(_checkpoint_dirs(config[subcommand]))
        if last is not None:
            verb = "resuming from" if subcommand == "fit" else "using"
            print(f"lit-gpu: {verb} {last}", file=sys.stderr, flush=True)
            config[key] = str(last)
        return
    if ckpt_path == "best" and subcommand != "fit":
        # Lightning knows "best" only right after fit in the same process; a later
        # `lit-gpu test --ckpt_path best` means the newest run's best-*.ckpt on disk.
        best = find_last_checkpoint(_checkpoint_dirs(config[subcommand]), prefix="best")
        if best is not None:
            print(f"lit-gpu: using {best}", file=sys.stderr, flush=True)
            config[key] = str(best)
        return
    if ckpt_path not in _SPECIAL_CKPT and "://" not in str(ckpt_path):
        check_checkpoint_file(ckpt_path)


def configure_trainer(trainer: pl.Trainer, config: Namespace, subcommand: str | None) -> None:
    """Atomic checkpoint IO, RNG state + interrupt checkpoint callbacks, and the predict writer."""
    install_atomic_checkpoint_io(trainer)
    trainer.callbacks.extend([RNGStateCallback(), CheckpointOnInterrupt()])
    predict_out = _get(config, f"{subcommand}.predict_out") if subcommand else None
    if subcommand == "predict" and predict_out:
        trainer.callbacks.append(CSVPredictionWriter(predict_out))


def maybe_tune_batch_size(
    trainer: pl.Trainer, model: pl.LightningModule, datamodule: Any, config: Any
) -> None:
    """Run Lightning's batch-size finder on ``datamodule.batch_size`` when ``--tune_batch_size true``."""
    if not _get(config, "fit.tune_batch_size", False):
        return
    from lightning.pytorch.tuner import Tuner

    if datamodule is None or not hasattr(datamodule, "batch_size"):
        from lit_gpu.errors import LitGpuError

        raise LitGpuError("--tune_batch_size needs a data module with a batch_size argument")
    found = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, mode="power")
    print(
        f"lit-gpu: batch-size finder chose data.batch_size={found}; set it in your config to skip tuning",
        file=sys.stderr,
        flush=True,
    )
