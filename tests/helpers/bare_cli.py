"""A LitGpuCLI subclass that overrides every public LightningCLI hook without ``super()``.

What a LightningCLI project's own CLI looks like when it builds its classes and its Trainer itself (the
shape of Lightning's ``instantiate_classes``, copied). lit_gpu's guarantees must still be on its Trainer.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.cli import LightningArgumentParser

from lit_gpu.cli import LitGpuCLI


class BareHooksCLI(LitGpuCLI):
    """Every public hook its own, none calling ``super()``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--my_note", type=str, default="")

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
        return None

    def before_instantiate_classes(self) -> None:
        self.seen = ["before_instantiate_classes"]

    def instantiate_classes(self) -> None:
        self.config_init = self.parser.instantiate_classes(self.config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self.trainer = self.instantiate_trainer()

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        config = dict(
            self.config_init[self.subcommand]["trainer"] if self.subcommand else self.config_init.trainer
        )
        return self.trainer_class(**{**config, **kwargs})

    def before_fit(self) -> None:
        self.seen.append("before_fit")

    def after_fit(self) -> None:
        self.seen.append("after_fit")


def main() -> None:
    """The project's entry point (``python -c 'from tests.helpers.bare_cli import main; main()' fit ...``)."""
    BareHooksCLI()
