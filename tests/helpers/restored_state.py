"""Real mid-epoch checkpoints, mutated field by field, restored in memory the way a resume restores them.

Two subjects: lit_gpu's ``RegressionModule(SimpleModel)`` on ``SyntheticRegressionDataModule`` (what
``configs/simple.yaml`` builds), and a foreign ``LightningModule`` that logs torchmetrics objects and a
``max``-reduced tensor. Each checkpoint is written by a real fit, inside its first epoch, with lit_gpu's
state-keeping callbacks. :func:`mutations` changes one field at a time (types, shapes, strides, ranges,
names, sizes); :func:`restore_in_memory` runs the contract check and then every restore of a resume.
Long mode: ``python -m tests.helpers.restored_state 20000``.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torchmetrics

from lit_gpu.callbacks import LoggingStateCallback, RNGStateCallback
from lit_gpu.checkpoints.contracts import check_restored_state
from lit_gpu.checkpoints.io import install_atomic_checkpoint_io
from lit_gpu.checkpoints.optimizer import check_optimizers, watch
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import explain
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.resume.state import LOGGING_STATE_KEY, _restore_metrics


class ForeignModule(pl.LightningModule):
    """Not a lit_gpu module: torchmetrics objects logged, a ``max`` reduction, Adam."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(10, 10)
        self.mse = torchmetrics.MeanSquaredError()
        self.mean = torchmetrics.MeanMetric()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.layer(x)
        loss = torch.nn.functional.mse_loss(out, y)
        self.mse(out, y)
        self.mean(loss)
        self.log("train/mse", self.mse, on_step=True, on_epoch=True)
        self.log("train/mean", self.mean, on_epoch=True)
        self.log("train/max", loss, on_step=False, on_epoch=True, reduce_fx="max")
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class SaveInsideEpoch(pl.Callback):
    """Saves ``path`` after the third training batch of the first epoch (a mid-epoch checkpoint)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        if trainer.current_epoch == 0 and idx == 2:
            trainer.save_checkpoint(self.path)


def _module(kind: str) -> pl.LightningModule:
    if kind == "lit_gpu":
        return RegressionModule(
            SimpleModel(10, 10), optimizer=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)
        )
    return ForeignModule()


def subject(kind: str) -> tuple[pl.LightningModule, SyntheticRegressionDataModule, list[pl.Callback]]:
    """A fresh module, data module and lit_gpu's state-keeping callbacks of ``kind``."""
    return (
        _module(kind),
        SyntheticRegressionDataModule(num_samples=512, batch_size=32),
        [
            RNGStateCallback(),
            LoggingStateCallback(),
        ],
    )


def mid_epoch_checkpoint(folder: Path, kind: str) -> Path:
    """A real fit of ``kind`` (``"lit_gpu"`` or ``"foreign"``) saved inside its first epoch."""
    path = folder / f"{kind}-mid-epoch.ckpt"
    module, data, callbacks = subject(kind)
    trainer = pl.Trainer(
        default_root_dir=folder,
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=5,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[*callbacks, SaveInsideEpoch(path)],
    )
    install_atomic_checkpoint_io(trainer)
    trainer.fit(module, data)
    return path


# ---- mutations --------------------------------------------------------------------------------------------
def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _leaves(item, (*path, i))


def _replacements(value: Any, rng: random.Random) -> list[tuple[str, Any]]:
    """What one field may be turned into: other types, shapes, strides, ranges, names and sizes."""
    out: list[tuple[str, Any]] = [
        ("None", None),
        ("a str", "os.system"),
        ("a negative int", -(2**40)),
        ("a huge int", 2**70),
        ("nan", float("nan")),
        ("a bool", True),
        ("a dict", {"x": 1}),
        ("a list", [1, "a"]),
        ("a stride-0 view", torch.zeros(1).expand(2**20)),
        ("a non-contiguous view", torch.zeros(6, 4).t()),
        ("a tensor of another shape", torch.zeros(rng.randint(2, 9), 3)),
        ("an int64 tensor", torch.zeros(3, dtype=torch.int64)),
        ("a bool tensor", torch.zeros(2, dtype=torch.bool)),
    ]
    if isinstance(value, torch.Tensor):
        out += [
            ("a reshaped tensor", value.reshape(-1) if value.dim() != 1 else value.reshape(1, -1)),
            ("another dtype", value.to(torch.float64 if value.dtype != torch.float64 else torch.int32)),
            ("a larger tensor", torch.zeros(value.numel() * 2 + 3)),
            ("a half tensor", value[: max(0, value.shape[0] // 2)] if value.dim() else value.reshape(1)),
            ("a negated tensor", -value.float() - 5 if value.dtype != torch.bool else value),
        ]
    elif type(value) is int:
        out += [("minus one", -1), ("value + 10**9", value + 10**9), ("a float", float(value) + 0.5)]
    elif isinstance(value, float):
        out += [("inf", float("inf")), ("negative", -abs(value) - 1)]
    elif isinstance(value, str):
        out += [("another name", value + "_x"), ("a module attribute", "layer"), ("empty", "")]
    elif isinstance(value, list):
        out += [("longer", [*value, *value[:1]] if value else [0]), ("shorter", value[:-1])]
    return out


def _with(value: Any, path: tuple[Any, ...], change: Any) -> Any:
    """``value`` with ``change(container, key)`` at ``path``: only the containers on the path copied."""
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    if len(path) == 1:
        change(copy, path[0])
    else:
        copy[path[0]] = _with(value[path[0]], path[1:], change)
    return tuple(copy) if isinstance(value, tuple) else copy


def mutations(checkpoint: dict[str, Any], count: int, seed: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """``count`` checkpoints, each ``checkpoint`` with one field changed (or a key dropped or added)."""
    rng = random.Random(seed)
    fields = [(p, v) for p, v in _leaves(checkpoint) if p and p[0] != "state_dict" or len(p) == 2]
    for _ in range(count):
        path, value = rng.choice(fields)
        choice = rng.random()
        if choice < 0.1 and isinstance(path[-1], str):
            label = "dropped"

            def change(container: Any, key: Any) -> None:
                del container[key]
        elif choice < 0.15 and isinstance(path[-1], str):
            label = "a key added beside it"

            def change(container: Any, key: Any) -> None:
                container["unknown_" + key] = container[key]
        else:
            label, new = rng.choice(_replacements(value, rng))

            def change(container: Any, key: Any, new: Any = new) -> None:
                container[key] = new

        yield f"{'.'.join(map(str, path))}: {label}", _with(checkpoint, path, change)


# ---- restoring ---------------------------------------------------------------------------------------------
class Subject:
    """The objects a resume of ``kind`` restores into, built once and restored into again and again."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.module, self.data, self.callbacks = subject(kind)
        self.data.setup("fit")
        self.loader = self.data.train_dataloader()


_SUBJECTS: dict[str, Subject] = {}


def restore_in_memory(checkpoint: dict[str, Any], kind: str) -> str:
    """The contract check, then every restore a resume makes (``"refused"`` or ``"restored"``).

    An error that is a ``LitGpuError`` or one line of :func:`lit_gpu.explain.explain` counts as refused;
    any other exception propagates (a traceback: the fuzz fails).
    """
    if kind not in _SUBJECTS:
        _SUBJECTS[kind] = Subject(kind)
    one = _SUBJECTS[kind]
    module, data, callbacks, loader = one.module, one.data, one.callbacks, one.loader
    try:
        check_restored_state(checkpoint, module, [data, *callbacks], "the fuzzed checkpoint")
        optimizer = module.configure_optimizers()
        optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
        check_optimizers(checkpoint, [optimizer], [], "the fuzzed checkpoint")  # what on_fit_start checks
        watch(optimizer, "the fuzzed checkpoint")  # and observes: the restore and the first step
        module.on_load_checkpoint(checkpoint)
        module.load_state_dict(checkpoint["state_dict"])
        for callback in callbacks:
            callback.on_load_checkpoint(None, module, checkpoint)  # type: ignore[arg-type]
            state = checkpoint.get("callbacks", {}).get(callback.state_key)
            if state is not None:
                callback.load_state_dict(state)
        logging = checkpoint.get(LOGGING_STATE_KEY)
        if logging:
            _restore_metrics(module, logging.get("metrics", {}))
            for metric in module.modules():
                if isinstance(metric, torchmetrics.Metric):
                    metric.compute()
        for saved in checkpoint.get("optimizer_states", [])[:1]:  # as Lightning: one per optimizer
            optimizer.load_state_dict(saved)
        for parameter in module.parameters():
            parameter.grad = torch.ones_like(parameter)
        optimizer.step()
        loops = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        for state in loops.get("combined_loader", []):
            loader.load_state_dict(state)
        next(iter(loader))
    except LitGpuError:
        return "refused"
    except Exception as err:
        if explain(err) is None:
            raise
        return "refused"
    return "restored"


def fuzz(checkpoints: dict[str, Path], count: int, seed: int = 0) -> dict[str, int]:
    """``count`` mutations spread over ``checkpoints`` (kind -> path): outcomes counted; RNGs put back."""
    from lit_gpu.checkpoints.read import read_checkpoint

    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    outcomes: dict[str, int] = {}
    try:
        for n, (kind, path) in enumerate(checkpoints.items()):
            base = read_checkpoint(path)
            for label, mutated in mutations(base, count // len(checkpoints), seed + n):
                try:
                    outcome = restore_in_memory(mutated, kind)
                except Exception as err:
                    raise AssertionError(
                        f"{kind} {label}: a traceback ({type(err).__name__}: {err})"
                    ) from err
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
    return outcomes


if __name__ == "__main__":  # python -m tests.helpers.restored_state 20000
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        made = {kind: mid_epoch_checkpoint(Path(folder), kind) for kind in ("lit_gpu", "foreign")}
        print(fuzz(made, int(sys.argv[1]) if len(sys.argv) > 1 else 20000))
