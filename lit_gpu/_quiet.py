"""Silence upstream chatter that says nothing about the user's run (ads, internal deprecations)."""

from __future__ import annotations

import logging
import warnings

_installed = False


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("💡 Tip")


def install() -> None:
    """Idempotently install the filters."""
    global _installed
    if _installed:
        return
    _installed = True
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_DropTips())
    # Lightning's own use of a torch-internal API; not actionable for users.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # Every resume/test into a new run folder triggers it; best/last paths are resolved by the CLI.
    warnings.filterwarnings("ignore", message=r".*The dirpath has changed from.*")
    # Misfires in notebooks and when lit_gpu.cli.main(argv) is called from Python.
    warnings.filterwarnings("ignore", message=r".*LightningCLI's args parameter is intended to run.*")
