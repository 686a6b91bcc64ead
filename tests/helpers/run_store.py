"""Run folders as ``lit-gpu fit`` leaves them (``ROOT/lit_gpu/version_N``), and a sub-command's parsed config,
for tests of the run store's choices (``--ckpt_path last|best|FILE``) without a fit."""

from __future__ import annotations

from pathlib import Path

import torch
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
