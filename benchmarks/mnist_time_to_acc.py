"""Time to 99.0 % MNIST test accuracy: lit_gpu's fast recipe against the classic PyTorch recipe.

    python benchmarks/mnist_time_to_acc.py [--data-dir ../shared/data] [--device cpu|cuda] [--threads 1]
    python benchmarks/mnist_time_to_acc.py --whole-process --seeds 0 1 2 --threads 1   # issue 22's figure

Both run in this one process, one after the other, on the same machine state:

* classic: torchvision MNIST with per-sample ToTensor/Normalize, DataLoader(batch 128, shuffle,
  2 workers), a small CNN (conv32-pool-conv64-pool-fc128-fc10), Adam 1e-3; test accuracy after
  every epoch; stops at the first epoch >= 99.0 %. Time = training + evaluation wall time.
* lit_gpu: ``configs/mnist_fast.yaml`` (tensor storage, FastMnistNet, OneCycle, 2 epochs) through
  the CLI classes; time = ``trainer.fit`` (data setup included) + ``trainer.test``.

Prints both times and the ratio lit_gpu / classic (issue #5 target on CPU: <= 0.15).

``--whole-process`` (issue 22, target <= 0.10): each recipe runs in a fresh ``python`` process timed
from spawn to exit, start-up included (interpreter, imports, CLI parsing, data, training, test):
lit_gpu once per ``--seeds`` seed before the classic recipe's run (``--seed``) and once more after it
(A-B-A: the machine's speed drifts by 10-20 % over minutes); its test accuracy must average >= 99.0 %,
each seed >= 98.9 %. The ratio is the median lit_gpu process over the classic process.
The load average before and after is printed, with the CPU the benchmark's own processes and all
other processes used during the run (``ForeignCpu``). The ratio is marked noise when the load before
the run exceeds ``--max-load`` (1.5) or other processes used more than ``--max-foreign`` (0.25) cores
during it; where ``/proc/stat`` is missing, when the load before or after exceeds ``--max-load``. The
load after is not the gate because it is mostly the benchmark's own: the classic recipe's main process
and its 2 DataLoader workers keep ~1.3 of the 2 cores busy (load 1.7-2.5 after it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import MNIST

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recipe import (  # noqa: E402
    DEFAULT_DATA,
    MAX_FOREIGN,
    MAX_LOAD,
    REPO,
    ForeignCpu,
    machine,
    ratio_noise,
    run_recipe,
    sync,
)

TARGET = 0.99


class ClassicCNN(nn.Module):
    """The textbook small MNIST CNN (Keras example shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (B, 1, 28, 28) -> (B, 32, 13, 13)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # -> (B, 64, 5, 5)
        x = F.relu(self.fc1(x.flatten(1)))  # -> (B, 128)
        return self.fc2(x)  # -> (B, 10)


def classic(data_dir: str, device: str, max_epochs: int, seed: int) -> dict[str, float]:
    """The classic loop; returns seconds to the first epoch at >= 99.0 % test accuracy."""
    torch.manual_seed(seed)
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train = MNIST(data_dir, train=True, download=False, transform=tf)
    test = MNIST(data_dir, train=False, download=False, transform=tf)
    pin = device == "cuda"
    train_loader = DataLoader(train, batch_size=128, shuffle=True, num_workers=2, pin_memory=pin)
    test_loader = DataLoader(test, batch_size=1000, num_workers=2, pin_memory=pin)
    model = ClassicCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    sync(device)
    start = time.perf_counter()
    acc, epoch = 0.0, 0
    for epoch in range(1, max_epochs + 1):  # noqa: B007
        model.train()
        for x, y in train_loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in test_loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                correct += (model(x).argmax(1) == y).sum().item()
        acc = correct / len(test)
        print(
            f"  classic epoch {epoch}: test acc {100 * acc:.2f} % at {time.perf_counter() - start:.1f} s",
            flush=True,
        )
        if acc >= TARGET:
            break
    sync(device)
    return {"seconds": time.perf_counter() - start, "acc": acc, "epochs": epoch, "reached": acc >= TARGET}


def _child(kind: str, args: argparse.Namespace, seed: int) -> tuple[float, dict]:
    """Run one recipe in a fresh process; (wall seconds from spawn to exit, the JSON it printed)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--seed", str(seed)]
    cmd += ["--data-dir", args.data_dir, "--device", args.device, "--config", args.config]
    cmd += ["--max-epochs", str(args.max_epochs)] + (["--threads", str(args.threads)] if args.threads else [])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode cached
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - t0
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.exit(f"{kind} recipe failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return seconds, json.loads(lines[-1])


def run_child(kind: str, args: argparse.Namespace) -> None:
    """Inside the child process: run one recipe, print its result as one JSON line."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if kind == "lit":
        from lit_gpu.cli.lightning_cli import LitGpuCLI  # noqa: F401  (the imports `lit-gpu fit` makes)
        from lit_gpu.cli.main import freeze_import_heap

        freeze_import_heap()  # as the `lit-gpu` command does after its imports (exit ~1.3 s faster)
        result = run_recipe(args.config, args.data_dir, args.device, args.seed)
        print(json.dumps({"acc": result["test_acc"], "fit_s": result["fit_s"]}))
    else:
        result = classic(args.data_dir, args.device, args.max_epochs, args.seed)
        print(json.dumps({"acc": result["acc"], "epochs": result["epochs"], "reached": result["reached"]}))


def whole_process(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()[0]
    foreign = ForeignCpu()
    lit: list[tuple[float, dict]] = []

    def lit_runs() -> None:
        for seed in args.seeds:
            lit.append(_child("lit", args, seed))
            print(f"  lit_gpu seed {seed}: {100 * lit[-1][1]['acc']:.2f} % in {lit[-1][0]:.1f} s", flush=True)

    lit_runs()
    base_s, base = _child("classic", args, args.seed)
    print(f"  classic seed {args.seed}: {100 * base['acc']:.2f} % ({base['epochs']} epochs), {base_s:.1f} s")
    lit_runs()  # A-B-A: the lit_gpu median spans the classic run
    load_after = os.getloadavg()[0]
    split = foreign.split()
    others, own = split if split is not None else (None, None)
    accs = [100 * r["acc"] for _, r in lit]  # both passes: the accuracy rule holds for every run
    lit_s = statistics.median(s for s, _ in lit)
    print(f"\nload average (1 min): before {load_before:.2f}, after {load_after:.2f}")
    if others is not None:
        print(f"CPU during the run: other processes {others:.2f} cores (busy time minus this benchmark's), "
              f"this benchmark's own processes {own:.2f} cores")  # fmt: skip
    print("\n| recipe (whole process) | test acc (%) | seconds |")
    print("|---|---:|---:|")
    print(f"| classic PyTorch loop, seed {args.seed} | {100 * base['acc']:.2f} | {base_s:.1f} |")
    first, second = accs[: len(args.seeds)], accs[len(args.seeds) :]
    cells = ", ".join(f"{a:.2f}" for a in first) + ("" if first == second else "; then " + ", ".join(
        f"{a:.2f}" for a in second))  # fmt: skip
    spread = f"{min(s for s, _ in lit):.1f}-{max(s for s, _ in lit):.1f}"
    name = f"lit_gpu {Path(args.config).name}, seeds {args.seeds}"
    print(f"| {name} | {cells} (mean {statistics.mean(accs):.2f}) | {lit_s:.1f} (median; {spread}) |")
    ok = statistics.mean(accs) >= 99.0 and min(accs) >= 98.9 and base["reached"]
    # the load after the run is mostly this benchmark's own (ratio_noise): the gate is the load
    # before it and the CPU other processes used during it
    why = ratio_noise(load_before, load_after, others, args.max_load, args.max_foreign)
    if why is not None:
        print(f"\nratio: noise: {why}")
    else:
        verdict = "meets" if ok and lit_s / base_s <= 0.10 else "misses"
        print(f"\nratio lit_gpu / classic = {lit_s / base_s:.3f}x (target <= 0.10x with mean >= 99.0 %, "
              f"each >= 98.9 %: {verdict})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA))
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--max-epochs", type=int, default=10, help="cap of the classic loop")
    parser.add_argument("--config", default=str(REPO / "configs" / "mnist_fast.yaml"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    parser.add_argument(
        "--whole-process", action="store_true", help="time fresh processes, start-up included"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="lit_gpu seeds (--whole-process)"
    )
    parser.add_argument("--max-load", type=float, default=MAX_LOAD, help="no ratio above this load before")
    parser.add_argument(
        "--max-foreign", type=float, default=MAX_FOREIGN, help="no ratio when other processes used more cores"
    )
    parser.add_argument("--child", choices=["lit", "classic"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, args)
        return
    if args.whole_process:
        print(f"# {machine()}; each recipe's process: {args.threads or 'PyTorch default'} intra-op threads")
        whole_process(args)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {machine()}")
    print("lit_gpu fast recipe ...", flush=True)
    fast = run_recipe(args.config, args.data_dir, args.device, args.seed)
    fast_ok = fast["test_acc"] >= TARGET
    print(
        f"  lit_gpu: test acc {100 * fast['test_acc']:.2f} % in {fast['total_s']:.1f} s "
        f"(fit {fast['fit_s']:.1f} s + test {fast['test_s']:.1f} s)",
        flush=True,
    )
    print("classic recipe ...", flush=True)
    base = classic(args.data_dir, args.device, args.max_epochs, args.seed)

    print("\n| recipe | test acc (%) | time to 99.0 % (s) |")
    print("|---|---:|---:|")
    fast_cell = f"{fast['total_s']:.1f}" if fast_ok else f"not reached ({fast['total_s']:.1f} s run)"
    base_cell = (
        f"{base['seconds']:.1f} ({base['epochs']} epochs)"
        if base["reached"]
        else (f"not reached in {base['epochs']} epochs ({base['seconds']:.1f} s)")
    )
    print(f"| classic PyTorch loop | {100 * base['acc']:.2f} | {base_cell} |")
    print(f"| lit_gpu mnist_fast.yaml | {100 * fast['test_acc']:.2f} | {fast_cell} |")
    if fast_ok and base["reached"]:
        ratio = fast["total_s"] / base["seconds"]
        verdict = "meets" if ratio <= 0.15 else "misses"
        print(
            f"\nratio lit_gpu / classic = {ratio:.3f}x ({base['seconds'] / fast['total_s']:.1f}x faster; "
            f"target <= 0.15x: {verdict})"
        )


if __name__ == "__main__":
    main()
