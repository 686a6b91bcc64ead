"""``LightningCLI``'s protected steps behind the gate (for ``LitGpuCLI``).

* ``_add_subcommands``: Lightning builds a parser for every subcommand (fit, validate, test, predict)
  before it knows which one runs; where the command line starts with one (:attr:`CLIHooks.only_subcommand`)
  only that one is built. Feature ``one-subcommand parse``: on another Lightning, every parser is built.
* ``_parse_ckpt_path``: Lightning re-parses a checkpoint's ``hyper_parameters`` (class included) over
  ``--config``; lit_gpu's config decides instead (the checkpoint was read weights-only and its class
  compared before). Feature ``config decides``: it cannot stand aside; on another Lightning one line says
  so, and the override stays.
* lit_gpu's own path (feature ``own CLI path``): every public ``LightningCLI`` hook
  (``add_arguments_to_parser``, ``before_instantiate_classes``, ``instantiate_trainer``, ``before_fit``...)
  is the user's to override without ``super()``. lit_gpu's steps run from Lightning's protected ones
  instead, each at the point of the public hook it accompanies: :meth:`CLIHooks._lit_gpu_arguments` just
  before ``add_arguments_to_parser`` (so that a subclass can change lit_gpu's defaults there),
  :meth:`~CLIHooks._lit_gpu_parsed` after the parse, :meth:`~CLIHooks._lit_gpu_before_instantiate` after the
  seed, :meth:`~CLIHooks._lit_gpu_trainer_config` / :meth:`~CLIHooks._lit_gpu_trainer_built` around the
  ``trainer_class(**config)`` call and :meth:`~CLIHooks._lit_gpu_before_run` after ``before_<subcommand>``.
  A trainer a subclass built without ``_instantiate_trainer`` (``instantiate_trainer`` overridden without
  ``super()``) gets :meth:`~CLIHooks._lit_gpu_trainer_built` just before the subcommand runs.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from typing_extensions import override

from lit_gpu.upstream.gate import stands_aside


class CLIHooks(LightningCLI):
    """``LightningCLI`` building one subcommand's parser, never re-parsing a checkpoint's hparams, and running
    lit_gpu's steps on its own path."""

    #: the subcommand the command line starts with (set before ``LightningCLI.__init__``), or None
    only_subcommand: str | None = None

    # ---- lit_gpu's steps (LitGpuCLI overrides them; each defaults to nothing) -------------------------
    def _lit_gpu_arguments(self, parser: LightningArgumentParser) -> None:
        """lit_gpu's arguments: after Lightning's core ones, before ``add_arguments_to_parser``."""

    def _lit_gpu_parsed(self) -> None:
        """After the command line is parsed (``self.config``), before the seed is set."""

    def _lit_gpu_before_instantiate(self) -> None:
        """After the seed is set (``self.subcommand`` known), before ``before_instantiate_classes``."""

    def _lit_gpu_trainer_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of ``trainer_class`` (``instantiate_trainer``'s, merged), before the call."""
        return config

    def _lit_gpu_trainer_built(self, trainer: Any) -> None:
        """The trainer ``trainer_class`` returned."""

    def _lit_gpu_trainer_failed(self, err: Exception) -> None:
        """``trainer_class(**config)`` raised ``err``: raise a clearer error, or return to re-raise it."""

    def _lit_gpu_before_run(self, subcommand: str) -> None:
        """After ``before_<subcommand>``, before the subcommand runs."""

    # ---- Lightning's protected steps ----------------------------------------------------------------
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
        stands_aside("own CLI path")
        self._lit_gpu_parsed()

    @override
    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        users = self.add_arguments_to_parser  # the subclass's hook, or LightningCLI's empty one

        def add_arguments_to_parser(parser: LightningArgumentParser) -> None:
            self._lit_gpu_arguments(parser)
            users(parser)

        self.add_arguments_to_parser = add_arguments_to_parser  # type: ignore[method-assign]  # this call only
        try:
            super()._add_arguments(parser)
        finally:
            del self.add_arguments_to_parser

    @override
    def _set_seed(self) -> None:
        super()._set_seed()
        self._lit_gpu_before_instantiate()

    @override
    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        config = self._lit_gpu_trainer_config(config)
        try:
            trainer = super()._instantiate_trainer(config, callbacks)
        except Exception as err:
            self._lit_gpu_trainer_failed(err)
            raise
        self._lit_gpu_trainer_built(trainer)
        self._lit_gpu_seen_trainer = trainer
        return trainer

    @override
    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        # Lightning calls it after before_<subcommand>, right before the subcommand runs
        if getattr(self, "_lit_gpu_seen_trainer", None) is not self.trainer:
            # a subclass built the trainer itself (instantiate_trainer or instantiate_classes overridden
            # without super()): lit_gpu's steps for a built trainer still run, its guarantees with them
            self._lit_gpu_trainer_built(self.trainer)
            self._lit_gpu_seen_trainer = self.trainer
        self._lit_gpu_before_run(subcommand)
        return super()._prepare_subcommand_kwargs(subcommand)


__all__ = ["CLIHooks"]
