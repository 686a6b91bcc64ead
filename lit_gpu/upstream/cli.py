"""``LightningCLI``'s protected parse steps behind the gate (for ``LitGpuCLI``).

* ``_add_subcommands``: Lightning builds a parser for every subcommand (fit, validate, test, predict)
  before it knows which one runs; where the command line starts with one (:attr:`CLIHooks.only_subcommand`)
  only that one is built. Feature ``one-subcommand parse``: on another Lightning, every parser is built.
* ``_parse_ckpt_path``: Lightning re-parses a checkpoint's ``hyper_parameters`` (class included) over
  ``--config``; lit_gpu's config decides instead (the checkpoint was read weights-only and its class
  compared before). Feature ``config decides``: it cannot stand aside; on another Lightning one line says
  so, and the override stays.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from typing_extensions import override

from lit_gpu.upstream.gate import stands_aside


class CLIHooks(LightningCLI):
    """``LightningCLI`` building one subcommand's parser, and never re-parsing a checkpoint's hparams."""

    #: the subcommand the command line starts with (set before ``LightningCLI.__init__``), or None
    only_subcommand: str | None = None

    @override
    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        only = self.only_subcommand
        if only is None or stands_aside("one-subcommand parse"):
            return super()._add_subcommands(parser, **kwargs)
        every = LightningCLI.subcommands()
        self.subcommands = lambda: {only: every[only]}  # type: ignore[method-assign]  # shadows the static one
        try:
            return super()._add_subcommands(parser, **kwargs)
        finally:
            del self.subcommands

    @override
    def _parse_ckpt_path(self) -> None:
        stands_aside("config decides")  # cannot stand aside: on a mismatch the line says so
        return


__all__ = ["CLIHooks"]
