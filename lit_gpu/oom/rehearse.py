"""Rehearse out-of-memory recovery on any machine, a CPU included (``--trainer.callbacks.loops all``: in every
loop)::

    lit-gpu fit --config configs/simple.yaml --oom_recovery true \\
        --trainer.callbacks+=lit_gpu.oom.OOMAbove --trainer.callbacks.batch_size 32
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import RunningStage
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle
from typing_extensions import override

__all__ = ["OOMAbove"]

_PHASES = ("forward", "backward")
# the loops OOMAbove can fail in, and the trainer stages each covers (validation: the sanity check too)
LOOPS = {
    "train": (RunningStage.TRAINING,),
    "validation": (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING),
    "test": (RunningStage.TESTING,),
    "predict": (RunningStage.PREDICTING,),
}


def _samples(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Samples in the first tensor argument (its first dimension), or ``None`` without one."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return None


class OOMAbove(Callback):
    """Raise ``torch.OutOfMemoryError`` (a CUDA OOM's text) whenever the module's forward sees more than
    ``batch_size`` samples (its first tensor argument: ``--oom_recovery``'s micro-batches count; a call inside
    another, as DDP's redirected ``training_step``, does not).

    ``ranks``: the global ranks that fail (``None``: all); ``from_step``: from this global step on; ``phase``:
    ``"forward"`` (at its end) or ``"backward"`` (at the module's first parameter, after the later layers'
    gradients; evaluation fails in the forward); ``loops``: ``"train"`` (default), ``"validation"`` (the
    sanity check too), ``"test"``, ``"predict"``, ``"all"`` or a list. ``raised``: errors raised so far.
    """

    def __init__(
        self,
        batch_size: int,
        ranks: list[int] | None = None,
        from_step: int = 0,
        phase: str = "forward",
        loops: str | list[str] = "train",
    ) -> None:
        super().__init__()
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        if phase not in _PHASES:
            raise ValueError(f"phase must be one of {_PHASES}, got {phase!r}")
        self.batch_size = batch_size
        self.ranks = None if ranks is None else [int(r) for r in ranks]
        self.from_step = from_step
        self.phase = phase
        names = list(LOOPS) if loops == "all" else [loops] if isinstance(loops, str) else list(loops)
        unknown = [n for n in names if n not in LOOPS]
        if unknown:
            raise ValueError(f"loops must be 'all' or among {tuple(LOOPS)}, got {unknown}")
        self.loops = names
        self._stages = {stage for name in names for stage in LOOPS[name]}
        self.raised = 0
        self._trainer: pl.Trainer | None = None
        self._handles: list[RemovableHandle] = []
        self._calls: list[list[Any]] = []  # [samples, saw an inner call] per open module call

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer
        if not self._handles:
            self._handles = [
                pl_module.register_forward_pre_hook(self._enter, with_kwargs=True),
                pl_module.register_forward_hook(self._exit, with_kwargs=True, always_call=True),
            ]

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._calls = []

    def _should_fail(self, samples: int | None) -> bool:
        trainer = self._trainer
        if trainer is None or trainer.state.stage not in self._stages:
            return False
        if samples is None or samples <= self.batch_size:
            return False
        if self.ranks is not None and trainer.global_rank not in self.ranks:
            return False
        return trainer.global_step >= self.from_step

    def _error(self, samples: int) -> torch.OutOfMemoryError:
        self.raised += 1
        rank = self._trainer.global_rank if self._trainer is not None else 0
        return torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate 2.00 GiB (simulated by lit_gpu.oom.OOMAbove on rank "
            f"{rank}: {samples} samples > batch_size {self.batch_size}, in the {self.phase} pass)"
        )

    def _pass(self) -> str:
        return self.phase if self._trainer is not None and self._trainer.training else "forward"

    def _enter(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._calls:
            self._calls[-1][1] = True  # the outer call (e.g. DDP's redirected training_step) is not a forward
        self._calls.append([_samples(args, kwargs), False])

    def _exit(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        samples, has_inner_call = self._calls.pop() if self._calls else (None, True)
        if has_inner_call or not self._should_fail(samples):
            return
        if self.phase == "forward" or not self._trainer.training:
            raise self._error(samples)
        first = next((p for p in module.parameters() if p.requires_grad), None)
        if first is None or not isinstance(output, Tensor) or not output.requires_grad:
            return
        armed: list[RemovableHandle] = []

        def fail(grad: Tensor) -> None:
            armed.pop().remove()
            raise self._error(samples)

        def arm(grad: Tensor) -> None:
            # this backward has started: fail when it reaches the module's first parameter, after
            # the gradients of the later layers were already written (as a real late OOM leaves them)
            armed.append(first.register_hook(fail))

        output.register_hook(arm)
