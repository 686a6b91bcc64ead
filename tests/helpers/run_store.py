"""Run folders as ``lit-gpu fit`` leaves them (``ROOT/lit_gpu/version_N``), and a sub-command's parsed config,
for tests of the run store's choices (``--ckpt_path last|best|FILE``) without a fit."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import yaml
from jsonargparse import Namespace

MODEL = "lit_gpu.modules.RegressionModule"
DATA = "lit_gpu.data.SyntheticDataModule"


def run_folder(root: Path, version: int = 0, step: int = 3) -> Path:
    """``root/lit_gpu/version_N`` with its ``config.yaml`` and a ``checkpoints/last.ckpt`` at ``step``."""
    run = root / "lit_gpu" / f"version_{version}"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"model:\n  class_path: {MODEL}\ndata:\n  class_path: {DATA}\n")
    header = {"global_step": step, "epoch": 0, "state_dict": {}, "pytorch-lightning_version": "2.6.6"}
    torch.save({**header, "hyper_parameters": {"_class_path": MODEL}}, run / "checkpoints" / "last.ckpt")
    return run


def subcommand(root: Path, ckpt_path: str, command: str = "fit") -> Namespace:
    """The parsed config of ``lit-gpu COMMAND --ckpt_path CKPT_PATH`` with ``root`` as the root folder."""
    sub = Namespace(
        ckpt_path=ckpt_path,
        new_run=False,
        model=Namespace(class_path=MODEL),
        data=Namespace(class_path=DATA),
        trainer=Namespace(default_root_dir=str(root), logger=None),
        checkpoint=Namespace(dirpath=None),
    )
    return Namespace(subcommand=command, **{command: sub})


#: two saved run configs (the parsed form config.yaml holds) that match different sub-commands
SIMPLE = {
    "model": {
        "class_path": "lit_gpu.modules.RegressionModule",
        "init_args": {
            "net": {"class_path": "lit_gpu.nets.SimpleModel", "init_args": {"in_features": 10}},
            "optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05}},
        },
    },
    "data": {"class_path": "lit_gpu.data.SyntheticRegressionDataModule", "init_args": {}},
}
FOONET = {
    "model": {
        "class_path": "lit_gpu.modules.RegressionModule",
        "init_args": {
            "net": {"class_path": "lit_gpu.nets.FooNet"},
            "optimizer": {"class_path": "torch.optim.Adam"},
        },
    },
    "data": {"class_path": "lit_gpu.data.SyntheticRegressionDataModule"},
}


def version_folder(parent: Path, n: int, config: dict | None, ckpts: dict[str, float] | None = None) -> Path:
    """``parent/version_N``: ``config`` as its config.yaml (None: none), checkpoints of those mtimes."""
    folder = parent / f"version_{n}"
    (folder / "checkpoints").mkdir(parents=True)
    if config is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
    for name, mtime in (ckpts or {}).items():
        path = folder / "checkpoints" / name
        path.write_bytes(b"x")
        os.utime(path, (mtime, mtime))
    return folder
