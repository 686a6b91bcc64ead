"""Silence upstream chatter that says nothing about the user's run (ads, internal deprecations).

Installed by :func:`lit_gpu.cli.main` only: importing lit_gpu changes no warning or logging state.
"""

from __future__ import annotations

import logging
import warnings

from typing_extensions import override


class _DropTips(logging.Filter):
    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("💡 Tip")


def install() -> None:
    """Install the filters; calling it again adds no duplicates (warnings dedupes identical filters)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in logger.filters):
            logger.addFilter(_DropTips())
    # Lightning's own use of a torch-internal API; not actionable for users.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # Every resume/test into a new run folder triggers it; best/last paths are resolved by the CLI.
    warnings.filterwarnings("ignore", message=r".*The dirpath has changed from.*")
    # A fit resumed from a checkpoint continues its run folder, checkpoints/ included.
    warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty.*")
