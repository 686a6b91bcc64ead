"""``ParallelStrategy``'s protected set-up hooks behind public names (for ``strategy: dp``).

Lightning 2 has no DataParallel strategy of its own; ``lit_gpu.strategies.dp`` builds one on
:class:`OneProcessStrategy`, which routes ``_configure_launcher`` and ``_setup_model`` to
:meth:`~OneProcessStrategy.check_devices` and :meth:`~OneProcessStrategy.setup_net`. It cannot stand
aside (there is no stock ``dp`` to run instead): where the gate finds another ``ParallelStrategy`` than
the one verified (feature ``dp``), one line says so and the strategy's tests are the judge.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import ParallelStrategy, StrategyRegistry
from torch import nn
from typing_extensions import override

from lit_gpu.upstream.gate import stands_aside


class OneProcessStrategy(ParallelStrategy):
    """A parallel strategy in one process: no launcher, the model set up by :meth:`setup_net`."""

    def check_devices(self) -> None:
        """Refuse what the strategy cannot do; called once the Trainer has set accelerator and devices."""

    def setup_net(self, model: nn.Module) -> nn.Module:
        """Set up the model before the optimizers are built (as ``Strategy._setup_model``)."""
        return model

    @override
    def _configure_launcher(self) -> None:
        stands_aside("dp")  # cannot stand aside: on a mismatch the line says so, and it runs
        self.check_devices()
        self._launcher = None

    @override
    def _setup_model(self, model: nn.Module) -> nn.Module:
        return self.setup_net(model)


def register_strategy(name: str, cls: type, description: str, registry: Any = StrategyRegistry) -> None:
    """Register ``cls`` as ``Trainer(strategy=name)`` in Lightning's StrategyRegistry (idempotent)."""
    if name not in registry:
        registry.register(name, cls, description=description)


__all__ = ["OneProcessStrategy", "register_strategy"]
