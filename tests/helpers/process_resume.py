"""A module whose training batches name their samples, for resumes in new processes (importable by the CLI).

:class:`Indexed` trains on the sample indices themselves (a plain ``DataLoader`` of its own, any workers,
persistent or not, any ``prefetch_factor``) and appends ``[step, epoch, indices]`` of each training batch
to the file ``$LIT_GPU_TEST_RECORDS`` (every process of a chain of stops appends to the same file). With
``$LIT_GPU_TEST_SIGTERM_AT`` set to N the process sends itself SIGTERM once global step N is done (the stop
lands at that step boundary: no timing).
"""

from __future__ import annotations

import json
import os
import signal

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

RECORDS, STOP_AT = "LIT_GPU_TEST_RECORDS", "LIT_GPU_TEST_SIGTERM_AT"


class Indices(Dataset):
    """Sample ``i`` is ``[i]`` (a float tensor)."""

    def __init__(self, samples: int) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index)])


class Indexed(pl.LightningModule):
    """A small net with dropout over the indices; shuffled train loader, unshuffled validation loader."""

    def __init__(
        self,
        samples: int = 32,
        batch_size: int = 8,
        workers: int = 0,
        persistent: bool = False,
        prefetch_factor: int | None = None,
        validate: bool = True,
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
        self.samples, self.batch_size, self.workers = samples, batch_size, workers
        self.persistent, self.prefetch_factor, self.validate = persistent, prefetch_factor, validate

    def _loader(self, shuffle: bool) -> DataLoader:
        extra = {"persistent_workers": self.persistent} if self.workers else {}
        if self.workers and self.prefetch_factor is not None:
            extra["prefetch_factor"] = self.prefetch_factor
        data = Indices(self.samples)
        return DataLoader(
            data, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.workers, **extra
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(shuffle=True)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader(shuffle=False) if self.validate else []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        with open(os.environ[RECORDS], "a") as f:
            indices = [int(i) for i in batch[:, 0].tolist()]
            f.write(json.dumps([self.global_step, self.current_epoch, indices]) + "\n")
        loss = self.net(batch / self.samples).pow(2).mean()
        self.log("train/loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val/loss", self.net(batch / self.samples).pow(2).mean())

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        stop = os.environ.get(STOP_AT, "")
        if stop and self.global_step == int(stop):
            os.kill(os.getpid(), signal.SIGTERM)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.01)
