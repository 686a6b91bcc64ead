"""A real ``last.ckpt`` of configs/simple.yaml, from one short in-process ``lit-gpu fit``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


def fit_simple(folder: Path) -> Path:
    """Run ``lit-gpu fit`` of the simple model for one epoch in ``folder``; its ``last.ckpt``."""
    from lit_gpu.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setattr(sys, "argv", ["lit-gpu"])
        main(["fit", *SIMPLE, "--trainer.max_epochs", "1"])
    return folder / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
