"""Rank script for tests/unit/test_free_gpus.py: ``python free_gpu_ranks.py free:N OUT_DIR``.

Resolves ``trainer.devices`` exactly as the CLI does (``resolve_trainer_config``), then starts the
other ranks with Lightning's own DDP launcher (``_SubprocessScriptLauncher``: it re-runs this argv with
``LOCAL_RANK`` set and a copy of ``os.environ``). Before launching, the parent makes the fake NVML show
rank 0's CUDA context on its GPU, as a child that asked NVML again would see. Every rank writes
``OUT_DIR/rank<r>.json``: the devices it got, its ``CUDA_VISIBLE_DEVICES`` and the GPU UUID its
``cuda:<r>`` is.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from jsonargparse import Namespace

from lit_gpu.devices import resolve_trainer_config


def _report(out: Path, trainer: Namespace) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ordinal = trainer.devices[local_rank]  # Lightning's DDP: local rank r uses devices[r]
    report = {
        "local_rank": local_rank,
        "devices": trainer.devices,
        "cuda_visible_devices": visible,
        "uuid": visible.split(",")[ordinal],
    }
    (out / f"rank{local_rank}.json").write_text(json.dumps(report))


def _occupy(uuid: str, gib: float) -> None:
    path = Path(os.environ["LIT_GPU_FAKE_NVML"])
    state = json.loads(path.read_text())
    for gpu in state["gpus"]:
        if gpu["uuid"] == uuid:
            gpu["free_gib"] -= gib
    path.write_text(json.dumps(state))


def main() -> None:
    from lightning.fabric.plugins.environments import LightningEnvironment
    from lightning.fabric.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

    request, out = sys.argv[1], Path(sys.argv[2])
    is_launcher = "LOCAL_RANK" not in os.environ
    trainer = Namespace(accelerator="gpu", devices=request, precision="32-true")
    choice = resolve_trainer_config(trainer)  # what LitGpuCLI.before_instantiate_classes does
    if not is_launcher:
        _report(out, trainer)
        return
    assert choice is not None
    _occupy(choice.gpus[0].uuid, 0.6)  # rank 0's CUDA context (~600 MB) lands on its GPU
    n = len(trainer.devices)
    launcher = _SubprocessScriptLauncher(LightningEnvironment(), num_processes=n, num_nodes=1)
    launcher.launch(_report, out, trainer)
    codes = [proc.wait() for proc in launcher.procs]
    sys.exit(max(codes, default=0))


if __name__ == "__main__":
    main()
