"""Whole-step capture: a training step's forward, backward and optimizer step replayed as one CUDA graph.

On a GPU a small step is bound by kernel launches and the host's Python, not by arithmetic: a
``FastMnistNet`` step launches ~60 kernels, each a few microseconds of host work. Capturing the
whole automatic-optimization step (``net(x)``, the loss, ``backward``, ``optimizer.step()``) once
and replaying it launches them all at once and skips their Python. ``torch.compile(mode=
"reduce-overhead")`` captures forward and backward only, and pays a compile in every new process;
this captures eager kernels, so the warm-up is a few ordinary steps and one capture (milliseconds).

Opt in with ``--speed.cuda_graph true`` (:class:`~lit_gpu.callbacks.speed.SpeedLevers`); it runs
inside :class:`~lit_gpu.fastpath.step.LeanOptimizerStep`. What a step does stays what it was:

* the module's arithmetic (``_forward_batch`` and ``compute_loss``) is captured; its logging and
  metrics (``_record_step``) run after each replay on the step's outputs, with the loss cloned out
  of the graph's memory, so logged values, epoch means and accuracy are the step's own;
* a batch is copied into the graph's input buffers (one copy kernel a tensor); a batch of another
  shape, dtype or device runs as an ordinary step;
* learning rates live in tensors on the device while it runs (a scheduler's ``fill_`` reaches the
  graph); checkpoints hold plain floats and the optimizer's own settings, as without capture;
* Lightning's progress counters move as in :class:`LeanOptimizerStep`'s step.

It stands aside, with one printed line, for what it cannot capture (:func:`capture_blocker`): no
CUDA device, a module that is not a :class:`~lit_gpu.modules.LitModule` with its own ``_step``,
an overridden ``backward`` or ``optimizer_zero_grad``, an optimizer without ``capturable``, a
scheduler that changes momentum every step, a callback or module hook inside the step (gradient
checks read tensors every step) unless it declares itself replay-safe (``graph_replay_hooks``),
OOM recovery; and, while running, for a hyperparameter other than the learning rate that changes
(a graph holds the value it was captured with) or a capture that fails (a host sync in the step).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.hooks import ModelHooks

from lit_gpu import messages
from lit_gpu.fastpath import own_hook

#: the hooks Lightning calls inside an optimizer step, in its order
STEP_HOOKS = ("on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step")

#: attribute of a callback class: the step hooks it may run *after* the replayed step, on the step's loss
REPLAY_HOOKS_ATTR = "graph_replay_hooks"

_LIT_MODULE = "lit_gpu.modules.base.LitModule"
_OOM_RECOVERY = "lit_gpu.callbacks.oom_recovery.OOMRecovery"

#: schedulers that change momentum/betas at every step when ``cycle_momentum`` is on
_CYCLING = ("OneCycleLR", "CyclicLR")


def _in_mro(cls: type, qualified_name: str) -> type | None:
    """The class named ``qualified_name`` in ``cls``'s MRO, or None; found by name: this room imports no
    layer above it (layer contract)."""
    return next((c for c in cls.__mro__ if f"{c.__module__}.{c.__qualname__}" == qualified_name), None)


def capture_blocker(trainer: pl.Trainer, module: pl.LightningModule, device: torch.device) -> str | None:
    """Why a fit cannot capture its steps (one short phrase), or None if it can."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    if device.type != "cuda" and not StepGraph.allow_cpu:
        return "it needs a CUDA device"
    cls = type(module)
    LitModule = _in_mro(cls, _LIT_MODULE)
    if LitModule is None:
        return f"{cls.__name__} is not a lit_gpu LitModule (its arithmetic is not known apart)"
    for name in ("training_step", "_step", "_record_step"):
        if getattr(cls, name) is not getattr(LitModule, name):
            return f"{cls.__name__} overrides {name}"
    for name in ("backward", "optimizer_zero_grad"):
        if is_overridden(name, module, pl.LightningModule):
            return f"{cls.__name__} overrides {name}"
    if trainer.accumulate_grad_batches != 1:
        return "gradient accumulation"
    optimizer = trainer.optimizers[0]
    for config in trainer.lr_scheduler_configs:
        scheduler = config.scheduler
        if type(scheduler).__name__ in _CYCLING and getattr(scheduler, "cycle_momentum", False):
            return f"{type(scheduler).__name__} changes momentum every step (set cycle_momentum: false)"
    if trainer.lr_scheduler_configs and "capturable" not in optimizer.defaults:
        return f"{type(optimizer).__name__} cannot take its learning rate from a tensor (use Adam or AdamW)"
    for cb in trainer.callbacks:
        if _in_mro(type(cb), _OOM_RECOVERY) is not None:
            return "OOM recovery retries steps eagerly"
        safe = getattr(type(cb), REPLAY_HOOKS_ATTR, ())
        for hook in STEP_HOOKS:
            if hook not in safe and own_hook(cb, hook, Callback) is not None:
                return f"{type(cb).__name__}.{hook} runs inside every step"
    for hook in STEP_HOOKS:
        if own_hook(module, hook, ModelHooks) is not None:
            return f"{cls.__name__}.{hook} runs inside every step"
    return None


class _Rerun:
    """A stand-in for ``torch.cuda.CUDAGraph`` that runs the captured function again at each replay.

    Tests only (``StepGraph.allow_cpu``): everything around the graph, on a CPU.
    """

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn

    def replay(self) -> None:
        self.fn()


class StepGraph:
    """One fit's captured step (made by :class:`~lit_gpu.fastpath.step.LeanOptimizerStep`).

    Args:
        trainer: The fitting trainer.
        optimizer: Its one optimizer.
        warmup: Ordinary steps before the capture (lazy state, cuDNN's choices, the allocator).
    """

    #: tests: let a CPU fit run the whole mechanism with :class:`_Rerun` in place of a CUDA graph
    allow_cpu = False

    def __init__(self, trainer: pl.Trainer, optimizer: torch.optim.Optimizer, warmup: int = 3) -> None:
        from lightning.pytorch.plugins.precision import MixedPrecision

        self.trainer, self.optimizer, self.warmup = trainer, optimizer, max(1, warmup)
        self.module = trainer.lightning_module
        self.device = trainer.strategy.root_device
        self.cuda = self.device.type == "cuda"
        precision = trainer.precision_plugin
        self.autocast_dtype = None
        if isinstance(precision, MixedPrecision):  # bf16-mixed (the lean step refuses a grad scaler)
            self.autocast_dtype = torch.bfloat16 if precision.precision == "bf16-mixed" else torch.float16
        self.static: list[torch.Tensor] | None = None
        self.graph: Any = None
        self.outputs: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None
        self.steps = 0  # steps run through this object (warm-up, capture, replays)
        self.replays = 0
        self.aside: str | None = None
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.replay_hooks = [
            fn
            for cb in trainer.callbacks
            for hook in getattr(type(cb), REPLAY_HOOKS_ATTR, ())
            if hook == "on_before_backward" and (fn := own_hook(cb, hook, Callback)) is not None
        ]
        self._saved: list[tuple[dict[str, Any], Any, Any]] = []  # (group, lr, capturable) to put back
        self._moved_steps: list[tuple[dict[str, Any], dict[str, Any], torch.Tensor]] = []
        self._prepare_optimizer()
        self.snapshot: list[list[tuple[str, Any]]] = []  # taken at the capture

    # ---- the optimizer's settings --------------------------------------------------------------
    def _prepare_optimizer(self) -> None:
        optimizer, device = self.optimizer, self.device
        tensor_lr = bool(self.trainer.lr_scheduler_configs) and "capturable" in optimizer.defaults
        for group in optimizer.param_groups:
            self._saved.append((group, group["lr"], group.get("capturable")))
            if tensor_lr and not isinstance(group["lr"], torch.Tensor):
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
            if "capturable" in group and self.cuda:
                group["capturable"] = True
                for p in group["params"]:  # a resumed state: steps on the device, as capturable keeps them
                    step = optimizer.state.get(p, {}).get("step")
                    if isinstance(step, torch.Tensor) and step.device != device:
                        optimizer.state[p]["step"] = step.to(device, torch.float32)
                        self._moved_steps.append((group, optimizer.state[p], step))
        optimizer._warned_capturable_if_run_uncaptured = True  # warm-up steps run uncaptured on purpose

    def restore_optimizer(self) -> None:
        """The optimizer's settings as they were: float learning rates, its own ``capturable``."""
        for group, lr, capturable in self._saved:
            if isinstance(group["lr"], torch.Tensor) and not isinstance(lr, torch.Tensor):
                group["lr"] = float(group["lr"])
            if capturable is not None:
                group["capturable"] = capturable
        for group, state, old in self._moved_steps:
            if not (group.get("capturable") or group.get("fused")):  # where torch keeps it then
                state["step"] = state["step"].to(old.device, old.dtype)
        self._saved, self._moved_steps = [], []

    def release(self) -> None:
        """Put the optimizer and schedulers back; drop every CUDA tensor, stream and graph the capture holds.

        Called when the fit ends. Lightning's teardown moves the module and optimizer to the CPU, but the
        capture's static batch, outputs, loss and graph would stay on the GPU inside the trainer's reference
        cycles until a garbage collection: one that runs in a forked ``DataLoader`` worker of a later fit
        (a notebook, a benchmark) frees a CUDA tensor there and kills the worker ("CUDA error:
        initialization error"; seen on an H200, issue 59). Dropped here, they go in this process, now.
        """
        self.restore_optimizer()
        for config in self.trainer.lr_scheduler_configs:  # a scheduler's last LRs: the groups' tensors
            last = getattr(config.scheduler, "_last_lr", None)  # torch's name (pinned: features' keys)
            if isinstance(last, list):
                config.scheduler._last_lr = [float(v) if isinstance(v, torch.Tensor) else v for v in last]
        self.graph = self.static = self.outputs = self.loss = self.stream = None
        self.snapshot, self.replay_hooks = [], []

    def _hyperparameters(self) -> list[list[tuple[str, Any]]]:
        """Each group's settings but its params (and its learning rate where that is a tensor)."""
        return [
            [
                (k, v)
                for k, v in g.items()
                if k != "params" and not (k == "lr" and isinstance(v, torch.Tensor))
            ]
            for g in self.optimizer.param_groups
        ]

    def _changed(self) -> str | None:
        """The first setting that differs from the one the graph was captured with, or None."""
        for group, snap in zip(self.optimizer.param_groups, self.snapshot, strict=False):
            for key, value in snap:
                now = group.get(key)
                if now is not value and now != value:
                    return key
        return None

    # ---- a step ----------------------------------------------------------------------------------
    def _fits(self, batch: Any) -> bool:
        static = self.static
        if type(batch) not in (list, tuple) or len(batch) < 2:
            return False
        if static is None:
            return all(type(t) is torch.Tensor and t.device == self.device for t in batch)
        if len(batch) != len(static):
            return False
        for t, s in zip(batch, static, strict=True):
            if (
                type(t) is not torch.Tensor
                or t.shape != s.shape
                or t.dtype != s.dtype
                or t.device != s.device
            ):
                return False
        return True

    def _arithmetic(self) -> None:
        """forward, loss, backward, optimizer step on the input buffers (what the graph holds)."""
        module, static = self.module, self.static
        with torch.enable_grad():
            context = (
                torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=False)
                if self.autocast_dtype is not None
                else contextlib.nullcontext()
            )
            with context:
                outputs = module._forward_batch(static[0])
                loss = module.compute_loss(outputs, static[1])
            loss.backward()
        self.optimizer.step()
        self.outputs, self.loss = outputs.detach(), loss.detach()

    def stand_aside(self, reason: str) -> None:
        """Run every later step of this fit as an ordinary step, saying why once."""
        if self.aside is None:
            self.aside = reason
            messages.tell(messages.CUDA_GRAPH_ASIDE.format(reason=reason))
        self.graph = None
        self.restore_optimizer()

    def run(self, batch: Any) -> torch.Tensor | None:
        """Run one step on ``batch``; its loss (cloned), or None where the caller must run it itself."""
        if self.aside is not None or not self._fits(batch):
            return None
        changed = self._changed() if self.graph is not None else None
        if changed is not None:
            self.stand_aside(f"the optimizer's {changed!r} changed after the capture")
            return None
        if self.static is None:
            self.static = [t.clone() for t in batch]
        else:
            for s, t in zip(self.static, batch, strict=True):
                s.copy_(t, non_blocking=True)
        if self.graph is None and self.steps < self.warmup:
            self._eager_step()
        else:
            if self.graph is None:
                try:
                    self._capture()
                except Exception as err:  # a host sync, an op that cannot be captured...
                    self.graph = None
                    self.optimizer.zero_grad(set_to_none=True)
                    if self.cuda:
                        torch.cuda.synchronize(self.device)
                    self.stand_aside(f"the step could not be captured ({messages.first_line(err)})")
                    return None
            self.graph.replay()  # the capture itself runs nothing: its step is this first replay
            self.replays += 1
        self.steps += 1
        return self.loss.clone()

    def _eager_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if not self.cuda:
            self._arithmetic()
            return
        stream = self.stream
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self._arithmetic()
        torch.cuda.synchronize(self.device)  # the warm-up's tensors cross streams: wait (a few steps only)

    def _capture(self) -> None:
        self.snapshot = self._hyperparameters()
        self.optimizer.zero_grad(set_to_none=True)  # backward allocates the grads in the graph's memory
        if not self.cuda:  # a graph's backward writes its grads afresh: so does each rerun
            self.graph = _Rerun(lambda: (self.optimizer.zero_grad(set_to_none=True), self._arithmetic()))
            return
        graph = torch.cuda.CUDAGraph()
        # thread_local: CUDA calls of other threads stay allowed while this one captures (the loader's
        # pin-memory thread allocates pinned host memory at any time; "global" would fail the capture)
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            self._arithmetic()
        self.graph = graph

    def after_replay(self, loss: torch.Tensor) -> None:
        """The hooks that declared themselves replay-safe, on the step's loss."""
        for fn in self.replay_hooks:
            fn(self.trainer, self.module, loss)

    # ---- checkpoints ------------------------------------------------------------------------------
    def plain_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Float learning rates and the optimizer's own ``capturable`` in ``checkpoint``: as uncaptured."""
        originals = [capturable for _, _, capturable in self._saved]
        for state in checkpoint.get("optimizer_states", []):
            for i, group in enumerate(state.get("param_groups", [])):
                if isinstance(group.get("lr"), torch.Tensor):
                    group["lr"] = float(group["lr"])
                if i < len(originals) and originals[i] is not None:
                    group["capturable"] = originals[i]
        for state in checkpoint.get("lr_schedulers", []):
            if isinstance(state, dict) and isinstance(state.get("_last_lr"), list):
                state["_last_lr"] = [
                    float(v) if isinstance(v, torch.Tensor) else v for v in state["_last_lr"]
                ]


__all__ = ["REPLAY_HOOKS_ATTR", "STEP_HOOKS", "StepGraph", "capture_blocker"]
