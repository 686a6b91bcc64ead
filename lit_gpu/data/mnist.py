"""MNIST on torchvision's own parser, with a seeded train/val split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset, Subset, random_split
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.devices import on_cuda
from lit_gpu.errors import LitGpuError
from lit_gpu.files.idx import check_idx_pair, idx_problem
from lit_gpu.messages import first_line
from lit_gpu.resume.loaders import (
    ResumableDataLoader,
    TensorLoader,
    check_loader_args,
    rank_and_world,
    use_pin_memory,
)

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
RAW_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def missing_raw_files(data_dir: str | Path) -> list[str]:
    """Names of the four IDX files missing under ``<data_dir>/MNIST/raw/``."""
    raw = Path(data_dir) / "MNIST" / "raw"
    return [name for name in RAW_FILES if not (raw / name).is_file()]


def idx_file_problem(path: str | Path) -> str | None:
    """Why an IDX file cannot be read (truncated, or not IDX at all), or ``None`` when its size is right.

    torchvision reads the whole file and reshapes it, so a short file fails with torch's
    ``shape '[60000, 28, 28]' is invalid``; the header tells the size the file must have
    (:mod:`lit_gpu.files.idx`).
    """
    return idx_problem(path)


class MNISTDataModule(pl.LightningDataModule):
    """MNIST digits: 55k train / 5k val (seeded split of the official train set), 10k test.

    Args:
        data_dir: Folder holding ``MNIST/raw/*-ubyte`` (torchvision's layout).
        batch_size: Per-process batch size.
        num_workers: DataLoader worker processes.
        pin_memory: Page-locked host memory for faster host-to-GPU copies. ``None`` (default)
            turns it on when the trainer runs on CUDA and off otherwise.
        val_size: Images held out of the official train set for validation.
        seed: Seed of the train/val split.
        download: Download the files when missing (needs internet).
        storage: ``"dataset"`` (default): torchvision's per-sample ToTensor/Normalize path through
            a DataLoader (use it to add augmentations). ``"tensor"``: the whole split normalized
            once into a float tensor ``(N, 1, 28, 28)`` and batched by index slicing
            (:class:`~lit_gpu.resume.loaders.TensorLoader`; no workers, no PIL).
            ``"gpu"``: as ``"tensor"``, with the tensors moved once to the trainer's CUDA device
            (falls back to ``"tensor"`` on CPU).
        drop_last: Drop the last incomplete training batch (tensor storage).
    """

    STORAGES = ("dataset", "tensor", "gpu")

    def __init__(
        self,
        data_dir: str = "data",
        batch_size: int = 128,
        num_workers: int = 2,
        pin_memory: bool | None = None,
        val_size: int = 5000,
        seed: int = 42,
        download: bool = True,
        storage: str = "dataset",
        drop_last: bool = False,
    ) -> None:
        super().__init__()
        check_loader_args(batch_size, num_workers)
        if storage not in self.STORAGES:
            raise LitGpuError(
                messages.BAD_DATA_CHOICE.format(
                    name="storage", choices=", ".join(self.STORAGES), value=storage
                )
            )
        self.save_hyperparameters()
        self.data_dir = str(data_dir)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.val_size = val_size
        self.seed = seed
        self.download = download
        self.storage = storage
        self.drop_last = drop_last
        self._tensors: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]] = {}
        self._transform: Any = None

    @property
    def transform(self) -> Any:
        """torchvision's ``ToTensor`` then ``Normalize`` (built, and torchvision imported, on first use)."""
        if self._transform is None:
            from torchvision import transforms

            self._transform = transforms.Compose(
                [transforms.ToTensor(), transforms.Normalize((MNIST_MEAN,), (MNIST_STD,))]
            )
        return self._transform

    @transform.setter
    def transform(self, value: Any) -> None:
        self._transform = value

    # ---- files --------------------------------------------------------------------------
    def _layout_hint(self) -> str:
        return f"{Path(self.data_dir) / 'MNIST' / 'raw'}/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte"

    def _not_found(self, missing: list[str]) -> LitGpuError:
        return LitGpuError(
            f"MNIST not found: expected {self._layout_hint()} (missing {', '.join(missing)}); "
            "point --data.data_dir at the folder that holds MNIST/, or set --data.download true"
        )

    @override
    def prepare_data(self) -> None:
        missing = missing_raw_files(self.data_dir)
        if not missing:
            return
        if not self.download:
            raise self._not_found(missing)
        from torchvision.datasets import MNIST  # only some commands need torchvision: imported here

        try:
            MNIST(self.data_dir, train=True, download=True)
            MNIST(self.data_dir, train=False, download=True)
        except Exception as err:  # URLError, HTTPError, checksum errors...
            raise LitGpuError(
                f"MNIST download failed ({first_line(err)}); offline? put the files at {self._layout_hint()} "
                "and point --data.data_dir at the folder that holds MNIST/ (--data.download false)"
            ) from None

    # ---- datasets -----------------------------------------------------------------------
    def _dataset(self, train: bool) -> Dataset:
        missing = missing_raw_files(self.data_dir)
        if missing:
            raise self._not_found(missing)
        raw = Path(self.data_dir) / "MNIST" / "raw"
        images, labels = RAW_FILES[:2] if train else RAW_FILES[2:]
        check_idx_pair(raw / images, raw / labels)  # each file's size, and as many labels as images
        from torchvision.datasets import MNIST

        return MNIST(self.data_dir, train=train, download=False, transform=self.transform)

    @override
    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit", "validate") and not hasattr(self, "train_set"):
            full = self._dataset(train=True)
            if not 0 < self.val_size < len(full):
                raise LitGpuError(f"val_size must be in (0, {len(full)}), got {self.val_size}")
            generator = torch.Generator().manual_seed(self.seed)
            self.train_set, self.val_set = random_split(
                full, [len(full) - self.val_size, self.val_size], generator=generator
            )
        if stage in (None, "test", "predict") and not hasattr(self, "test_set"):
            self.test_set = self._dataset(train=False)

    # ---- loaders ------------------------------------------------------------------------
    def _use_pin_memory(self) -> bool:
        return use_pin_memory(self.pin_memory, self.trainer)

    def _rank_and_world(self) -> tuple[int, int]:
        return rank_and_world(self.trainer)

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        kwargs = dict(
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            pin_memory=self._use_pin_memory(),
            persistent_workers=self.num_workers > 0,
        )
        if shuffle:  # training: resumable at any sample, sharded by the loader itself under DDP
            rank, world = self._rank_and_world()
            return ResumableDataLoader(
                dataset, shuffle=True, seed=self.seed, rank=rank, world_size=world, **kwargs
            )
        # a private generator: starting an evaluation never draws from the global torch RNG
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(dataset, shuffle=False, generator=generator, **kwargs)

    def _split_loader(self, split: str, shuffle: bool) -> DataLoader | TensorLoader:
        if self.storage != "dataset":
            return self._tensor_loader(split, shuffle=shuffle)
        return self._loader(getattr(self, f"{split}_set"), shuffle=shuffle)

    @override
    def train_dataloader(self) -> DataLoader | TensorLoader:
        return self._split_loader("train", shuffle=True)

    @override
    def val_dataloader(self) -> DataLoader | TensorLoader:
        return self._split_loader("val", shuffle=False)

    @override
    def test_dataloader(self) -> DataLoader | TensorLoader:
        return self._split_loader("test", shuffle=False)

    @override
    def predict_dataloader(self) -> DataLoader | TensorLoader:
        return self._split_loader("test", shuffle=False)

    # ---- tensor storage (storage: tensor | gpu) -----------------------------------------
    def _storage_device(self) -> torch.device:
        if self.storage == "gpu" and on_cuda(self.trainer):
            return self.trainer.strategy.root_device
        return torch.device("cpu")

    def split_tensors(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized images ``(N, 1, 28, 28)`` float32 and labels ``(N,)`` of a split, built once.

        Same values as the torchvision path (ToTensor then Normalize), without PIL.
        """
        device = self._storage_device()
        key = (split, str(device))
        if key not in self._tensors:
            subset = {"train": "train_set", "val": "val_set", "test": "test_set"}[split]
            dataset = getattr(self, subset)
            indices = None
            if isinstance(dataset, Subset):
                dataset, indices = dataset.dataset, torch.as_tensor(dataset.indices)
            images, labels = dataset.data, dataset.targets  # uint8 (N, 28, 28), int64 (N,)
            if indices is not None:
                images, labels = images[indices], labels[indices]
            # one new float tensor, then in place: each out-of-place pass would allocate (and page
            # fault in) another 172 MB for the training split, ~0.2 s a pass on a small CPU
            images = images.to(device).unsqueeze(1).to(torch.float32, copy=True)
            images.div_(255).sub_(MNIST_MEAN).div_(MNIST_STD)  # ToTensor, then Normalize: same values
            self._tensors[key] = (images, labels.to(device))
        return self._tensors[key]

    def _tensor_loader(self, split: str, shuffle: bool) -> TensorLoader:
        rank, world = self._rank_and_world()
        images, labels = self.split_tensors(split)
        return TensorLoader(
            images,
            labels,
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=self.drop_last and shuffle,
            seed=self.seed,
            rank=rank,
            world_size=world,
        )
