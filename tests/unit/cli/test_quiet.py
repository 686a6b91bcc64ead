"""The CLI's quieting: Lightning's lines that lit_gpu's own say better are dropped, nothing else."""

from __future__ import annotations

import logging
import warnings

import pytest
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from lit_gpu.cli import quiet


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lightning_lines():
    """What Lightning's rank-zero logger lets through, without the filters of an earlier in-process CLI;
    its filters and level put back afterwards."""
    loggers = [logging.getLogger(name) for name in quiet._LOGGERS]
    saved = [(logger, list(logger.filters), logger.level) for logger in loggers]
    handler = _Lines()
    for logger in loggers:
        logger.filters[:] = [f for f in logger.filters if not isinstance(f, quiet._DropLines)]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield handler.lines
    for logger, filters, level in saved:
        logger.removeHandler(handler)
        logger.filters[:] = filters
        logger.setLevel(level)


def _say_all() -> None:
    for line in (
        "GPU available: False, used: False",
        "TPU available: False, using: 0 TPU cores",
        "Restoring states from the checkpoint path at runs/lit_gpu/version_0/checkpoints/last.ckpt",
        "Restored all states from the checkpoint at runs/lit_gpu/version_0/checkpoints/last.ckpt",
        "💡 Tip: For seamless cloud logging ...",
        "TPU available: True, using: 8 TPU cores",
    ):
        rank_zero_info(line)


def test_install_drops_the_tpu_line_without_tpus_and_the_restore_lines(lightning_lines):
    with warnings.catch_warnings():  # install() adds warning filters: keep them in this test
        quiet.install()
        quiet.install()  # again: no duplicate filters
    _say_all()
    assert lightning_lines == ["GPU available: False, used: False", "TPU available: True, using: 8 TPU cores"]
    assert sum(isinstance(f, quiet._DropLines) for f in logging.getLogger(quiet._LOGGERS[0]).filters) == 2


def test_drop_tips_alone_keeps_the_restore_lines(lightning_lines):
    """Notebooks and LitGpuCLI from Python: the adverts and the TPU line go, the restore lines stay."""
    quiet.drop_tips()
    _say_all()
    assert [line.split(" from")[0] for line in lightning_lines] == [
        "GPU available: False, used: False",
        "Restoring states",
        "Restored all states",
        "TPU available: True, using: 8 TPU cores",
    ]


def test_drop_tips_silences_the_tree_spec_warning_of_lightnings_internals():
    """A notebook's work folder (``demo.work_dir``) calls ``drop_tips``: Lightning's pytree helper no longer
    raises torch's ``LeafSpec`` FutureWarning in every fit's output."""
    from lightning.pytorch.utilities._pytree import _tree_flatten

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.drop_tips()
        _tree_flatten(1.0)
    assert not [w for w in caught if "LeafSpec" in str(w.message)]
    with warnings.catch_warnings(record=True) as caught:  # without the filter it is raised
        warnings.simplefilter("always")
        _tree_flatten(1.0)
    assert [w for w in caught if "LeafSpec" in str(w.message)]
