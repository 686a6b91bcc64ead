"""Differential resume cases: an uninterrupted fit against resumes from the checkpoints it or a resume wrote.

A :class:`Case` is a tiny fit (a plain ``DataLoader`` of the module's own, an optimizer, maybe a scheduler,
accumulation, precision) with one or several stop points and maybe a change of the loader between the save
and the resume. :func:`check` runs it in this process:

* the reference: the uninterrupted fit, ``last.ckpt`` written after every step (lit_gpu's
  ``FreshLastCheckpoint``), each write kept (:class:`KeptSaves`);
* a resume from the reference's save at the first stop point, to the end; a resume from that resume's save
  at the next stop point, and so on (a chain of stops, each in a fit of its own);
* each resume must end with bit-equal weights, optimizer and scheduler states and logged rows
  (``metrics.csv``: each ``(metric, step)``'s values after the stop, the resume's being the reference's),
  **or** have printed the line saying why it is not (``lit-gpu: ... the training loader ...``).

A case with no change must be bit-equal (the data is deterministic): a line is no excuse there.
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, TensorDataset

from lit_gpu.callbacks import FreshLastCheckpoint, LoggingStateCallback, RNGStateCallback

#: what a resume prints when it is not exact because of the loader (lit_gpu.messages)
WHY_NOT_WORDS = ("the training loader",)


@dataclass(frozen=True)
class Loader:
    """A plain ``DataLoader``'s settings, as ``train_dataloader()`` builds it."""

    samples: int = 24
    batch_size: int = 4
    drop_last: bool = False
    sampler: str = "random"  # sequential | random | random_generator | distributed
    loader_generator: bool = False
    workers: int = 0
    persistent: bool = False
    seed: int = 3  # the sampler's generator's seed, or the DistributedSampler's

    def epoch_batches(self) -> int:
        """Batches an epoch has."""
        return self.samples // self.batch_size if self.drop_last else -(-self.samples // self.batch_size)

    def build(self) -> DataLoader:
        """A new loader (new generators, as a new process builds them)."""
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(self.samples, 4, generator=g), torch.randn(self.samples, 1, generator=g)
        data = TensorDataset(x, y)
        kwargs: dict[str, Any] = {"batch_size": self.batch_size, "drop_last": self.drop_last}
        if self.sampler == "random":
            kwargs["shuffle"] = True
        elif self.sampler == "random_generator":
            kwargs["sampler"] = RandomSampler(data, generator=torch.Generator().manual_seed(self.seed))
        elif self.sampler == "distributed":
            kwargs["sampler"] = DistributedSampler(data, num_replicas=1, rank=0, seed=self.seed)
        if self.loader_generator:
            kwargs["generator"] = torch.Generator().manual_seed(11)
        if self.workers:
            kwargs.update(num_workers=self.workers, persistent_workers=self.persistent)
        return DataLoader(data, **kwargs)


@dataclass(frozen=True)
class Case:
    """One differential case (see the module's docstring)."""

    loader: Loader = field(default_factory=Loader)
    epochs: int = 2
    accumulate: int = 1
    optimizer: str = "sgd"  # sgd (momentum) | adam | adamw
    scheduler: str = "none"  # none | step | epoch: StepLR's interval
    precision: str = "32-true"  # or bf16-mixed
    stops: tuple[float, ...] = (0.5,)  # where each stop falls, as a fraction of the fit's saves
    change: tuple[str, Any] | None = None  # a loader field and its value at the resumes

    def resumed_loader(self) -> Loader:
        if self.change is None:
            return self.loader
        return replace(self.loader, **{self.change[0]: self.change[1]})


class Tiny(pl.LightningModule):
    """A two-layer net with dropout (the global RNG), logging its loss per step and per epoch."""

    def __init__(self, case: Case, loader: Loader) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
        self.case, self.loader_settings = case, loader

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).float(), y)
        self.log("train/loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.net(x).float(), y))

    def train_dataloader(self):
        return self.loader_settings.build()

    def val_dataloader(self):
        g = torch.Generator().manual_seed(1)
        data = TensorDataset(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g))
        return DataLoader(data, batch_size=8)

    def configure_optimizers(self):
        kind = self.case.optimizer
        if kind == "sgd":
            opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        else:
            opt = (torch.optim.Adam if kind == "adam" else torch.optim.AdamW)(self.parameters(), lr=0.01)
        if self.case.scheduler == "none":
            return opt
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.case.scheduler}}


class KeptSaves(TorchCheckpointIO):
    """Lightning's checkpoint IO, keeping a copy of every ``last.ckpt`` written (``saves/NNN.ckpt``)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.kept: list[Path] = []

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        super().save_checkpoint(checkpoint, path, storage_options)
        if Path(path).name == "last.ckpt":
            self.folder.mkdir(parents=True, exist_ok=True)
            copy = self.folder / f"{len(self.kept):03d}.ckpt"
            shutil.copyfile(path, copy)
            self.kept.append(copy)


@dataclass
class Outcome:
    """What a fit ended with."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    schedulers: list[dict[str, Any]]
    rows: dict[tuple[str, int], list[str]]
    saves: list[Path]


def fit(case: Case, loader: Loader, root: Path, ckpt: Path | None = None) -> Outcome:
    """One fit of ``case`` with ``loader`` in ``root`` (from ``ckpt``), as the CLI's callbacks run it."""
    pl.seed_everything(7, verbose=False)
    io = KeptSaves(root / "saves")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=case.epochs,
        precision=case.precision,
        accumulate_grad_batches=case.accumulate,
        logger=CSVLogger(root, name="log", version=0),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        plugins=[io],
        callbacks=[
            RNGStateCallback(),
            LoggingStateCallback(),
            FreshLastCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_last=True, save_top_k=0),
        ],
    )
    model = Tiny(case, loader)
    trainer.fit(model, ckpt_path=None if ckpt is None else str(ckpt))
    return Outcome(
        weights={k: v.clone() for k, v in model.state_dict().items()},
        optimizer=trainer.optimizers[0].state_dict(),
        schedulers=[c.scheduler.state_dict() for c in trainer.lr_scheduler_configs],
        rows=_rows(root / "log" / "version_0" / "metrics.csv"),
        saves=list(io.kept),
    )


def _rows(path: Path) -> dict[tuple[str, int], list[str]]:
    """metrics.csv as ``(metric, step) -> the values logged, in order`` (the text as written)."""
    rows: dict[tuple[str, int], list[str]] = {}
    if not path.exists():  # a resume with nothing left to train
        return rows
    with path.open() as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key not in ("step", "epoch") and value != "":
                    rows.setdefault((key, int(row["step"])), []).append(value)
    return rows


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b


def differences(ref: Outcome, got: Outcome, stop_step: int) -> list[str]:
    """What ``got`` (resumed after ``stop_step``) has other than the uninterrupted ``ref``."""
    found = []
    for name, (a, b) in {
        "weights": (ref.weights, got.weights),
        "optimizer": (ref.optimizer, got.optimizer),
        "schedulers": (ref.schedulers, got.schedulers),
    }.items():
        if not _equal(a, b):
            found.append(name)
    bad = []
    for key in set(ref.rows) | set(got.rows):
        want, have = ref.rows.get(key, []), got.rows.get(key, [])
        after = key[1] > stop_step and want != have
        at = key[1] == stop_step and have != want[len(want) - len(have) :]  # a suffix: rows after the save
        if after or at or (key[1] < stop_step and have):
            bad.append(key)
    if bad:
        found.append(f"metrics.csv rows {sorted(bad)[:4]}")
    return found


_REFERENCES: dict[tuple[Case, Loader], Outcome] = {}


def reference(case: Case, root: Path) -> Outcome:
    """The uninterrupted fit, in a folder of ``root`` (kept for the session: cases differing only in their
    stops or change share it)."""
    key = (replace(case, stops=(), change=None), case.loader)
    if key not in _REFERENCES:
        _REFERENCES[key] = fit(case, case.loader, root / f"reference{len(_REFERENCES)}")
    return _REFERENCES[key]


def _step_of(ckpt: Path) -> tuple[int, int, int]:
    """A save's global step, and the epoch loop's processed batches and the epoch."""
    state = torch.load(ckpt, weights_only=True, map_location="cpu")
    loop = state["loops"]["fit_loop"]
    processed = loop["epoch_loop.batch_progress"]["current"]["processed"]
    return state["global_step"], processed, state["epoch"]


def stop_saves(case: Case, saves: list[Path], after: int = -1) -> list[Path]:
    """The saves a stop can take: those after step ``after`` at an optimizer step (a ``last.ckpt`` in the
    middle of an accumulation is left out: issue 57's other half; with ``every_n_train_steps=1`` as here
    ``FreshLastCheckpoint`` writes none, so this excludes nothing today). A save at an epoch's last batch
    (before its end) is a stop like any other, in any place of a chain."""
    chosen = []
    for path in saves:
        step, processed, _ = _step_of(path)
        at_step = case.accumulate == 1 or processed % case.accumulate == 0
        if step > after and at_step:
            chosen.append(path)
    return chosen


def check(case: Case, root: Path, said: Any, references: Path, lines: list[str] | None = None) -> list[str]:
    """Run ``case`` in ``root``; the problems found (``[]``: every resume exact, or said why not); the lines
    saying why a resume is not exact are appended to ``lines``.

    ``said()`` returns what lit-gpu printed since the last call (a capture of stderr); ``references`` is a
    folder that lasts the session (the uninterrupted fits).
    """
    ref = reference(case, references)
    source, after, problems, baseline = ref, -1, [], ref
    for i, fraction in enumerate(case.stops):
        loader_case = case if i == 0 else replace(case, loader=case.resumed_loader())
        candidates = stop_saves(loader_case, source.saves, after)
        if not candidates:
            break
        ckpt = candidates[min(len(candidates) - 1, int(fraction * len(candidates)))]
        step = _step_of(ckpt)[0]
        said()
        got = fit(case, case.resumed_loader(), root / f"resume{i}", ckpt)
        printed = said().splitlines()
        why = [ln for ln in printed if ln.startswith("lit-gpu:") and any(w in ln for w in WHY_NOT_WORDS)]
        if lines is not None:
            lines.extend(why)
        diffs = differences(baseline, got, step)
        changed = case.change is not None and i == 0  # later resumes continue the changed run: no change
        if diffs and not (changed and why):
            problems.append(f"resume {i} from step {step} ({ckpt.name}): {', '.join(diffs)}; lines: {why}")
        if changed:
            baseline = got  # the changed run is the later resumes' uninterrupted one
        source, after = got, step
    return problems
