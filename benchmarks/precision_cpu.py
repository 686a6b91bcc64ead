"""Does bf16-mixed speed up training on this CPU without hurting accuracy? (issue #3, `precision: auto`)

Trains ``MnistCNN`` with a plain loop on real MNIST tensors in fp32 and in bf16 autocast (what
Lightning's ``bf16-mixed`` does on CPU), alternating the order per seed, and prints ms/step and
test accuracy. Usage::

    python benchmarks/precision_cpu.py --data-dir ../shared/data --steps 300 --seeds 0 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn import functional as F
from torchvision.datasets import MNIST

from lit_gpu.data.mnist import MNIST_MEAN, MNIST_STD
from lit_gpu.devices import auto_precision
from lit_gpu.nets import MnistCNN


def load(data_dir: str, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    ds = MNIST(data_dir, train=train, download=False)
    x = ((ds.data.float() / 255 - MNIST_MEAN) / MNIST_STD).unsqueeze(1)  # (N, 1, 28, 28)
    return x, ds.targets


def run(bf16: bool, seed: int, steps: int, batch: int, data, test) -> tuple[float, float]:
    torch.manual_seed(seed)
    net = MnistCNN()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    x, y = data
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    times = []
    for step in range(steps):
        idx = order[(step * batch) % len(x) :][:batch]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(net(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= 5:
            times.append(time.perf_counter() - t0)
    net.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        acc = (net(test[0]).argmax(-1) == test[1]).float().mean().item()
    return 1000 * statistics.median(times), acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--test-images", type=int, default=10000)
    args = parser.parse_args()
    data = load(args.data_dir, train=True)
    tx, ty = load(args.data_dir, train=False)
    test = (tx[: args.test_images], ty[: args.test_images])
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, threads {threads}, precision auto here: {auto_precision('cpu')}")
    print("| seed | fp32 ms/step | bf16-mixed ms/step | speedup | fp32 test acc | bf16 test acc |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, seed in enumerate(args.seeds):
        order = (False, True) if i % 2 == 0 else (True, False)
        res = {bf16: run(bf16, seed, args.steps, args.batch, data, test) for bf16 in order}
        (t32, a32), (t16, a16) = res[False], res[True]
        print(
            f"| {seed} | {t32:.1f} | {t16:.1f} | {t32 / t16:.2f}x | {100 * a32:.2f} % | {100 * a16:.2f} % |"
        )


if __name__ == "__main__":
    main()
