"""Silence upstream chatter that says nothing about the user's run (ads, internal deprecations).

Installed by :func:`lit_gpu.cli.main` only: importing lit_gpu changes no warning or logging state.
:func:`drop_tips` alone (Lightning's "💡 Tip" adverts for its cloud services, its TPU line where there is
none, the tree-spec FutureWarning of Lightning's internals) also when a notebook makes its work folder
(:func:`lit_gpu.demo.work_dir`) or builds a :class:`~lit_gpu.cli.LitGpuCLI`. :func:`install` also drops
Lightning's lines around a checkpoint's restore, which the CLI's own resolution lines say.
"""

from __future__ import annotations

import logging
import warnings

from typing_extensions import override

#: Lightning's lines that say nothing where lit_gpu runs: its cloud adverts, and its TPU line on a machine
#: without TPUs (the GPU line stays)
NOISE = ("💡 Tip", "TPU available: False")
#: Lightning's two lines around a checkpoint's restore, which the CLI's own lines say already ("resuming
#: from ... (why)", "using ...", "continuing the run in ..."): dropped by :func:`install` only
RESTORE_LINES = (
    "Restoring states from the checkpoint path at ",
    "Restored all states from the checkpoint at ",
    "Loaded model weights from the checkpoint at ",
)
_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _DropLines(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)


def _drop(prefixes: tuple[str, ...]) -> None:
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropLines) and f.prefixes == prefixes for f in logger.filters):
            logger.addFilter(_DropLines(prefixes))


#: torch's FutureWarning at Lightning's use of a torch-internal API (``LeafSpec``): not the user's to act on
TREESPEC_WARNING = r".*isinstance\(treespec, LeafSpec\).*"


def drop_tips() -> None:
    """Drop Lightning's "💡 Tip" log lines (cloud-service adverts), its "TPU available: False" line and the
    tree-spec FutureWarning its every fit raised in a notebook; calling it again adds no duplicate."""
    _drop(NOISE)
    warnings.filterwarnings("ignore", message=TREESPEC_WARNING)


def install() -> None:
    """Install the filters; calling it again adds no duplicates (warnings dedupes identical filters)."""
    drop_tips()
    _drop(RESTORE_LINES)
    # Every resume/test into a new run folder triggers it; best/last paths are resolved by the CLI.
    warnings.filterwarnings("ignore", message=r".*The dirpath has changed from.*")
    # A fit resumed from a checkpoint continues its run folder, checkpoints/ included.
    warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty.*")
