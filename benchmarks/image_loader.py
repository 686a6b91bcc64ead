"""The image data path alone: lit_gpu's synthetic image loader against torchvision's per-sample transforms.

    python benchmarks/image_loader.py                       # 224 px, batch 64, 2 workers: the host's side
    python benchmarks/image_loader.py --device cuda --batch-size 256 --workers 6   # on a GPU machine

Images/s from the loader's iterator to a normalized float batch on ``--device`` (the copy and the
normalization included, synchronized at the end), the first batches aside; ``--device host`` (the
default) times what the host must sustain for a GPU: the batches as the loader hands them over (the
uint8 contestants' normalization is the GPU's, a few kernels). The same uint8 images
(:func:`lit_gpu.data.images.make_images`), crops padded by 4 and horizontal flips:

* ``lit_gpu``: :class:`lit_gpu.data.SyntheticImageDataModule`'s training loader (lit_gpu's resumable
  loader, a batch fetched at once, one slice copy per crop, uint8 through the workers and the copy,
  normalized on the device by the data module's ``on_after_batch_transfer``);
* ``tv_float``: the common recipe: a ``Dataset`` applying torchvision's ``transforms.v2`` per sample in
  the workers (``RandomCrop(padding=4)``, ``RandomHorizontalFlip``, ``ToDtype(float32, scale=True)``,
  ``Normalize``), float batches through the workers and the copy;
* ``tv_uint8``: the same per-sample crop and flip, uint8 through the workers, normalized on the device
  (the best alternative written by hand: timm's ``PrefetchLoader`` normalizes there too).

Contestants run interleaved ``--repeats`` times; the median is reported with the load average before and
after (above 1.5 on this 2-core VM the figures are noise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recipe import machine, sync  # noqa: E402

from lit_gpu.data import SyntheticImageDataModule  # noqa: E402
from lit_gpu.data.images import IMAGE_MEAN, IMAGE_STD, normalize_images  # noqa: E402

CONTESTANTS = ("lit_gpu", "tv_float", "tv_uint8")


class PerSample(Dataset):
    """torchvision's ``transforms.v2`` on each uint8 image, as a user's ``Dataset.__getitem__`` does."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, size: int, to_float: bool) -> None:
        from torchvision.transforms import v2

        steps = [v2.RandomCrop(size, padding=4), v2.RandomHorizontalFlip()]
        if to_float:
            steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize([IMAGE_MEAN] * 3, [IMAGE_STD] * 3)]
        self.images, self.labels, self.transform = images, labels, v2.Compose(steps)

    def __len__(self) -> int:
        return self.labels.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.transform(self.images[index]), self.labels[index]


def loader(name: str, data: SyntheticImageDataModule, args: argparse.Namespace) -> DataLoader:
    if name == "lit_gpu":
        return data.train_dataloader()
    pin = args.device == "cuda"  # pinned memory where the batches go on to a GPU
    dataset = PerSample(data.train_set.images, data.train_set.labels, args.image_size, name == "tv_float")
    return DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, drop_last=True, num_workers=args.workers,
        pin_memory=pin, persistent_workers=args.workers > 0,
    )  # fmt: skip


def images_per_s(name: str, data: SyntheticImageDataModule, args: argparse.Namespace) -> float:
    """The contestant's images/s over ``--batches`` batches after ``--warmup`` (workers started)."""
    batches = iter(loader(name, data, args))
    for _ in range(args.warmup):
        next(batches)
    t0 = time.perf_counter()
    for _ in range(args.batches):
        x, y = next(batches)
        if args.device == "host":
            continue
        x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
        if name == "lit_gpu":
            x, y = data.on_after_batch_transfer([x, y], 0)
        elif name == "tv_uint8":
            x = normalize_images(x)
        assert x.dtype == torch.float32
    if args.device != "host":
        sync(args.device)
    seconds = time.perf_counter() - t0
    del batches
    return args.batches * args.batch_size / seconds


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["host", "cpu", "cuda"], default="host")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batches", type=int, default=12, help="timed batches per contestant and round")
    p.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="+", default=list(CONTESTANTS), choices=CONTESTANTS)
    args = p.parse_args(argv)
    print(f"# {machine()}")
    n = (args.warmup + args.batches) * args.batch_size
    print(f"# {args.image_size} px, batch {args.batch_size}, {args.workers} workers, {n} images, "
          f"x{args.repeats} interleaved, to {args.device}")  # fmt: skip
    data = SyntheticImageDataModule(
        num_samples=n, image_size=args.image_size, batch_size=args.batch_size, num_workers=args.workers,
        pin_memory=args.device == "cuda", seed=0,
    )  # fmt: skip
    data.setup()
    load_before = os.getloadavg()[0]
    results: dict[str, list[float]] = {name: [] for name in args.only}
    for r in range(args.repeats):
        for name in args.only:
            results[name].append(images_per_s(name, data, args))
            print(f"# round {r}: {name}: {results[name][-1]:.0f} images/s, load {os.getloadavg()[0]:.2f}")
    load_after = os.getloadavg()[0]
    median = {name: statistics.median(v) for name, v in results.items()}
    print("\n| contestant | images/s (median) | rounds | vs lit_gpu |")
    print("|---|---:|---|---:|")
    for name, value in median.items():
        vs = f"{value / median['lit_gpu']:.2f}x" if "lit_gpu" in median else "-"
        rounds = ", ".join(f"{v:.0f}" for v in results[name])
        print(f"| {name} | {value:.0f} | {rounds} | {vs} |")
    print(f"\nload average before {load_before:.2f}, after {load_after:.2f} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
