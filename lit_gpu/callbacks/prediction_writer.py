"""Write ``predict`` outputs to a CSV file as they are produced."""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints.io import atomic_file


class CSVPredictionWriter(BasePredictionWriter):
    """Stream predictions to CSV.

    Classifier outputs (rows of probabilities) become ``index,prediction,probability``: the
    argmax class and its probability. Other outputs become ``index,output_0,output_1,...``.
    ``index`` is the sample's position in the predict dataset. The file appears (atomically
    renamed from a temp file) when prediction ends.

    Args:
        output_path: CSV file to write, or a function returning it when prediction starts (the
            folder of the run, known only once the run has its folder).
        kind: ``"auto"`` (probabilities if every row is in [0, 1] and sums to 1), ``"classification"``
            or ``"raw"``.
    """

    def __init__(
        self, output_path: str | os.PathLike | Callable[[], Path] = "predictions.csv", kind: str = "auto"
    ) -> None:
        super().__init__(write_interval="batch")
        if kind not in ("auto", "classification", "raw"):
            raise ValueError(f"kind must be 'auto', 'classification' or 'raw', got {kind!r}")
        self._where = output_path if callable(output_path) else None
        self.output_path = Path("predictions.csv") if callable(output_path) else Path(output_path)
        self.kind = kind
        self.rows = 0
        self._open: ExitStack | None = None  # the atomic temp file while predicting
        self._writer: Any = None

    def _is_probabilities(self, out: torch.Tensor) -> bool:
        if self.kind != "auto":
            return self.kind == "classification"
        if out.ndim != 2 or not out.is_floating_point():
            return False
        sums = out.sum(dim=-1)
        return bool(
            ((out >= 0) & (out <= 1)).all() and torch.allclose(sums, torch.ones_like(sums), atol=1e-3)
        )

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        if self._where is not None:
            self.output_path = Path(self._where())
        self._open = ExitStack()
        self._writer = csv.writer(self._open.enter_context(atomic_file(self.output_path, "w", newline="")))
        self.rows = 0

    @override
    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: Any,
        batch_indices: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        if self._writer is None:
            return
        out = prediction.detach().float().cpu()
        if out.ndim == 1:
            out = out.unsqueeze(-1)
        out = out.reshape(len(out), -1)
        indices = list(batch_indices) if batch_indices else range(self.rows, self.rows + len(out))
        probabilities = self._is_probabilities(out)
        if self.rows == 0:
            header = (
                ["prediction", "probability"]
                if probabilities
                else [f"output_{i}" for i in range(out.shape[1])]
            )
            self._writer.writerow(["index", *header])
        if probabilities:
            prob, pred = out.max(dim=-1)
            for i, p, q in zip(indices, pred.tolist(), prob.tolist(), strict=True):
                self._writer.writerow([i, p, f"{q:.6f}"])
        else:
            for i, row in zip(indices, out.tolist(), strict=True):
                self._writer.writerow([i, *(f"{v:.6g}" for v in row)])
        self.rows += len(out)

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._open is None:
            return
        self._open.close()  # fsync + rename into place
        self._open = self._writer = None
        messages.tell(
            messages.WROTE_PREDICTIONS.format(rows=self.rows, path=self.output_path), stream=sys.stdout
        )

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if self._open is not None:  # the temp file goes, an earlier output_path stays
            self._open.__exit__(type(exception), exception, exception.__traceback__)
            self._open = self._writer = None
