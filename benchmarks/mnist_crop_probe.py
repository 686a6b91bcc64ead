"""A lever tried for issue 22's MNIST target: train on the central crop of each image (plain PyTorch loop).

    python benchmarks/mnist_crop_probe.py --crop 0 --seeds 0       # mnist_fast's net and schedule
    python benchmarks/mnist_crop_probe.py --crop 2 --seeds 0 1 2   # 24x24: the border is ~always empty

Same data path as ``storage: tensor`` (IDX files normalised once into tensors, batches by index), the same
``FastMnistNet(12, 24, k=5)`` with its head sized to the crop, AdamW + OneCycle over 2 epochs of the 55k
split, batch 128, channels_last, one intra-op thread; test accuracy on the official 10k images. Prints the
training seconds (loop only: no start-up, no test) and the load average before each run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F
from torchvision.datasets import MNIST

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lit_gpu.data.mnist import MNIST_MEAN, MNIST_STD  # noqa: E402
from lit_gpu.nets import FastMnistNet  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"  # holds MNIST/raw/


def split(train: bool, crop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalized images (channels_last, ``crop`` pixels cut off each side) and labels, as storage: tensor."""
    dataset = MNIST(str(DATA), train=train, download=False)
    x = dataset.data.unsqueeze(1).float().div(255).sub(MNIST_MEAN).div(MNIST_STD)  # (N, 1, 28, 28)
    x = x[..., crop : 28 - crop, crop : 28 - crop] if crop else x
    return x.contiguous(memory_format=torch.channels_last), dataset.targets


def run(crop: int, seed: int, epochs: int = 2, batch: int = 128, lr: float = 0.01) -> tuple[float, float]:
    """(training seconds, test accuracy %) for one seed."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(60000, generator=g)[:55000]
    x, y = split(True, crop)
    x, y = x[keep], y[keep]
    xt, yt = split(False, crop)
    net = FastMnistNet(12, 24, kernel_size=5)
    side = ((28 - 2 * crop - 4) // 2 - 4) // 2
    net.head = torch.nn.Linear(24 * side * side, 10)  # (B, 24 * side * side) -> (B, 10)
    net = net.to(memory_format=torch.channels_last)
    steps = len(x) // batch
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps * epochs)
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for i in range(steps):
            ids = order[i * batch : (i + 1) * batch]
            loss = F.cross_entropy(net(x[ids]), y[ids])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    seconds = time.perf_counter() - start
    net.eval()
    with torch.no_grad():
        correct = sum(
            (net(xt[i : i + 1000]).argmax(1) == yt[i : i + 1000]).sum().item() for i in range(0, 10000, 1000)
        )
    return seconds, correct / 100


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--crop", type=int, default=2, help="pixels cut from each side (0: the full 28x28)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for seed in args.seeds:
        load = os.getloadavg()[0]
        seconds, acc = run(args.crop, seed)
        print(f"crop {args.crop} seed {seed}: train {seconds:.2f} s, test acc {acc:.2f} % (load {load:.2f})")


if __name__ == "__main__":
    main()
