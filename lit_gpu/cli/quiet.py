"""Silence upstream chatter that says nothing about the user's run (ads, internal deprecations).

Installed by :func:`lit_gpu.cli.main` only: importing lit_gpu changes no warning or logging state.
:func:`drop_tips` alone (Lightning's "💡 Tip" adverts for its cloud services) also when a notebook makes
its work folder (:func:`lit_gpu.demo.work_dir`) or builds a :class:`~lit_gpu.cli.LitGpuCLI`.
"""

from __future__ import annotations

import logging
import warnings

from typing_extensions import override


class _DropTips(logging.Filter):
    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("💡 Tip")


def drop_tips() -> None:
    """Drop Lightning's "💡 Tip" log lines (cloud-service adverts); calling it again adds no duplicate."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in logger.filters):
            logger.addFilter(_DropTips())


def install() -> None:
    """Install the filters; calling it again adds no duplicates (warnings dedupes identical filters)."""
    drop_tips()
    # Lightning's own use of a torch-internal API; not actionable for users.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # Every resume/test into a new run folder triggers it; best/last paths are resolved by the CLI.
    warnings.filterwarnings("ignore", message=r".*The dirpath has changed from.*")
    # A fit resumed from a checkpoint continues its run folder, checkpoints/ included.
    warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty.*")
