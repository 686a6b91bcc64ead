"""Write ``predict`` outputs to a CSV file as they are produced."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import IO, Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter


class CSVPredictionWriter(BasePredictionWriter):
    """Stream predictions to CSV.

    Classifier outputs (rows of probabilities) become ``index,prediction,probability``: the
    argmax class and its probability. Other outputs become ``index,output_0,output_1,...``.
    ``index`` is the sample's position in the predict dataset. The file appears (atomically
    renamed from a temp file) when prediction ends.

    Args:
        output_path: CSV file to write.
        kind: ``"auto"`` (probabilities if every row is in [0, 1] and sums to 1), ``"classification"``
            or ``"raw"``.
    """

    def __init__(self, output_path: str | os.PathLike = "predictions.csv", kind: str = "auto") -> None:
        super().__init__(write_interval="batch")
        if kind not in ("auto", "classification", "raw"):
            raise ValueError(f"kind must be 'auto', 'classification' or 'raw', got {kind!r}")
        self.output_path = Path(output_path)
        self.kind = kind
        self.rows = 0
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._tmp: Path | None = None

    def _is_probabilities(self, out: torch.Tensor) -> bool:
        if self.kind != "auto":
            return self.kind == "classification"
        if out.ndim != 2 or not out.is_floating_point():
            return False
        sums = out.sum(dim=-1)
        return bool(
            ((out >= 0) & (out <= 1)).all() and torch.allclose(sums, torch.ones_like(sums), atol=1e-3)
        )

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        self.output_path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.output_path.with_name(f".{self.output_path.name}.{os.getpid()}.tmp")
        self._file = open(self._tmp, "w", newline="")  # noqa: SIM115 - closed in on_predict_end
        self._writer = csv.writer(self._file)
        self.rows = 0

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

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._file is None or self._tmp is None:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = self._writer = None
        os.replace(self._tmp, self.output_path)
        print(f"lit-gpu: wrote {self.rows} predictions to {self.output_path}", flush=True)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if self._file is not None and self._tmp is not None:
            self._file.close()
            self._tmp.unlink(missing_ok=True)
            self._file = self._writer = None
