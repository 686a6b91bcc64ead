"""A quiet CPU Trainer for unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl


def quiet_trainer(tmp_path: Path | None = None, **overrides: Any) -> pl.Trainer:
    """One CPU device; no logger, progress bar, model summary or checkpointing unless overridden."""
    kwargs: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    if tmp_path is not None:
        kwargs["default_root_dir"] = tmp_path
    kwargs.update(overrides)
    return pl.Trainer(**kwargs)
