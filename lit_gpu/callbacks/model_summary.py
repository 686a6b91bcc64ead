"""Lightning's model summary without its FLOPs column and total where every count is zero.

Lightning 2.6 counts FLOPs only through a forward of ``example_input_array``: a module without one (most)
gets a FLOPs column of zeros and ``0 Total Flops``, which reads as a measurement. :func:`lean_model_summary`
gives the summary Lightning added (``ModelSummary`` or ``RichModelSummary``, exact types: a user's own
subclass is left alone) these classes, which drop both while the total is zero and are Lightning's
otherwise.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelSummary, RichModelSummary
from lightning.pytorch.utilities.model_summary.model_summary import (
    get_formatted_model_size,
    get_human_readable_count,
)
from typing_extensions import override

from lit_gpu.messages import shown

#: Lightning's logger of the plain table, and the column and total line it writes for FLOPs
_TABLE_LOGGER = "lightning.pytorch.callbacks.model_summary"
FLOPS_COLUMN = "FLOPs"
FLOPS_TOTAL = "Total Flops"


def _without_flops(summary_data: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    return [(name, values) for name, values in summary_data if name != FLOPS_COLUMN]


class _DropFlopsTotal(logging.Filter):
    """Takes the ``... Total Flops`` line out of the plain table's one log record."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            lines = record.msg.split("\n")
            record.msg = "\n".join(line for line in lines if not line.rstrip().endswith(FLOPS_TOTAL))
        return True


class LeanModelSummary(ModelSummary):
    """:class:`ModelSummary` without the FLOPs column and total when no FLOP was counted."""

    @staticmethod
    @override
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        if total_flops:
            ModelSummary.summarize(
                summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                total_flops, **summarize_kwargs,
            )  # fmt: skip
            return
        logger, drop = logging.getLogger(_TABLE_LOGGER), _DropFlopsTotal()
        logger.addFilter(drop)
        try:
            ModelSummary.summarize(
                _without_flops(summary_data), total_parameters, trainable_parameters, model_size,
                total_training_modes, total_flops, **summarize_kwargs,
            )  # fmt: skip
        finally:
            logger.removeFilter(drop)


class LeanRichModelSummary(RichModelSummary):
    """:class:`RichModelSummary` without the FLOPs column and total when no FLOP was counted (its table
    otherwise, as Lightning 2.6 draws it)."""

    @staticmethod
    @override
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        if total_flops:
            RichModelSummary.summarize(
                summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                total_flops, **summarize_kwargs,
            )  # fmt: skip
            return
        from rich import get_console
        from rich.table import Table

        summary_data = _without_flops(summary_data)
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        table.add_column(" ", style="dim")
        table.add_column("Name", justify="left", no_wrap=True)
        table.add_column("Type")
        for name, _ in summary_data[3:]:  # Params, [Params per Device], Mode, [In sizes, Out sizes]
            if name in ("In sizes", "Out sizes"):
                table.add_column(name, justify="right", style="white")
            else:
                table.add_column(name, justify="right" if name.startswith("Params") else "left")
        for row in zip(*(values for _, values in summary_data), strict=True):
            table.add_row(*(shown(str(value)) for value in row))  # layer names are the user's
        console = get_console()
        console.print(table)
        grid = Table.grid(expand=True)
        grid.add_column()
        grid.add_column()
        counts = (trainable_parameters, total_parameters - trainable_parameters, total_parameters)
        labels = ("Trainable params", "Non-trainable params", "Total params")
        for label, count in zip(labels, counts, strict=True):
            grid.add_row(shown(f"[bold]{label}[/]: {get_human_readable_count(int(count)):<10}"))
        size = get_formatted_model_size(model_size)
        grid.add_row(shown(f"[bold]Total estimated model params size (MB)[/]: {size:<10}"))
        grid.add_row(shown(f"[bold]Modules in train mode[/]: {total_training_modes['train']}"))
        grid.add_row(shown(f"[bold]Modules in eval mode[/]: {total_training_modes['eval']}"))
        console.print(grid)


def lean_model_summary(trainer: pl.Trainer) -> None:
    """Give the summary Lightning added (an exact ``ModelSummary``/``RichModelSummary``) the lean class.

    The object stays (its depth and settings with it); only its ``summarize`` changes.
    """
    lean = {ModelSummary: LeanModelSummary, RichModelSummary: LeanRichModelSummary}
    for callback in trainer.callbacks:
        if type(callback) in lean:
            callback.__class__ = lean[type(callback)]
