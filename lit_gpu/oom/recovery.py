"""Out of memory is not the end of a run: split the batch into micro-batches and retry the same step.

``lit-gpu fit --oom_recovery true`` adds :class:`OOMRecovery`. When a step raises ``torch.OutOfMemoryError``
(or CUDA's OOM ``RuntimeError``), its memory is released, the micro-batch halved and the *same* batch trained
again: the effective batch, the optimizer steps and the LR schedule do not change; the micro-batch that fits
is kept in the checkpoint. One step (``training_step`` wrapped, the loader's batch unchanged):

1. each micro-batch of ``m`` of the ``N`` samples runs the module's own ``training_step``; its loss scaled by
   ``m / N`` (and the fp16 GradScaler) is back-propagated at once: the gradients add up to the full batch's;
2. after every forward and backward all processes agree whether one ran out of memory (one tiny all-reduce;
   under DDP the gradients accumulate locally, as under ``no_sync``), so every rank halves at the same point;
3. the gradients are taken off the parameters and handed back by the returned loss, whose backward delivers
   them: Lightning then runs its usual backward, hooks, clipping, DDP all-reduce and optimizer step.

An OOM in a forward keeps the micro-batches done; one in a backward starts the batch again. Earlier batches of
an ``accumulate_grad_batches`` window are kept aside. Evaluation is split the same way (its own
``eval_micro_batch_size``). On a GPU the recovery turns on PyTorch's expandable segments for the run
(:func:`set_expandable_segments`). Without recovery, :class:`OOMLoopName` names the loop in the OOM message.
"""

from __future__ import annotations

import gc
import inspect
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import extract_batch_size
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor, nn
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import is_out_of_memory
from lit_gpu.strategies.dp import DataParallelStrategy
from lit_gpu.upstream import set_allocator_settings

__all__ = [
    "ALLOC_CONF_ENV",
    "LOOP_ATTRIBUTE",
    "OOMLoopName",
    "OOMRecovery",
    "has_batchnorm",
    "loop_words",
    "set_expandable_segments",
]


# ---- what --oom_recovery says: its refusals and its progress lines (printed with messages.tell) ------
OOM_RECOVERY_MANUAL_OPTIMIZATION = (
    "--oom_recovery splits batches under automatic optimization, but {module} uses manual optimization; "
    "catch torch.OutOfMemoryError in its training_step instead"
)
OOM_RECOVERY_STRATEGY = (
    "--oom_recovery works with one device, ddp and dp, not {strategy}; drop --oom_recovery, or use "
    "--trainer.strategy ddp"
)
OOM_RECOVERY_SYNC_BATCHNORM = (
    "--oom_recovery cannot be combined with SyncBatchNorm (--trainer.sync_batchnorm true): it exchanges "
    "statistics inside the forward pass, so an OOM on one process would hang the others"
)
OOM_ADAPTED = "out of memory at step {step} ({point}) with {was} -> micro-batch {micro} x {count}"
OOM_ADAPTED_EVAL = "out of memory during {loop} at batch {index} with {was} -> micro-batch {micro} x {count}"
OOM_ADAPTED_PROCESSES = " on all {world} processes ({failed} ran out)"
OOM_ADAPTED_BATCHNORM = " (BatchNorm layers now compute batch statistics over {micro} samples, not {total})"
MICRO_BATCH_FROM_CHECKPOINT = (
    "micro-batch {micro} x {count} from the checkpoint (found by out-of-memory recovery)"
)


# ---- PyTorch's CUDA allocator: expandable segments on while a run recovers from out of memory ------
ALLOC_CONF_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _set_allocator_settings(settings: str) -> None:
    """PyTorch's runtime allocator setting (private, pinned): torch >= 2.9's name, else the older one."""
    set_allocator_settings(settings)


def set_expandable_segments(on: bool) -> bool:
    """Turn the CUDA allocator's expandable segments on or off (a freed block can then not be pinned by a
    small allocation placed in it), unless the user's environment sets them; whether it changed."""
    if any("expandable_segments" in os.environ.get(name, "") for name in ALLOC_CONF_ENV):
        return False  # the user's own choice
    _set_allocator_settings(f"expandable_segments:{on}")
    return True


# ---- which loop ran out of memory: the one-line message names it -------------------------------------
LOOP_ATTRIBUTE = "lit_gpu_loop"  # set on an out-of-memory exception: the loop it came from, in words
_LOOP_WORDS = {
    RunningStage.TRAINING: "training",
    RunningStage.SANITY_CHECKING: "the sanity check (validation before training)",
    RunningStage.VALIDATING: "validation",
    RunningStage.TESTING: "testing",
    RunningStage.PREDICTING: "prediction",
}
# the step each evaluation stage of Trainer.<fn> runs (the sanity check runs validation_step)
EVAL_STEPS = {"fit": ("validation_step",), "validate": ("validation_step",), "test": ("test_step",)}
EVAL_STEPS["predict"] = ("predict_step",)


def loop_words(trainer: pl.Trainer) -> str:
    """The loop ``trainer`` is running, in words ("training", "validation", ...)."""
    return _LOOP_WORDS.get(trainer.state.stage, "training")  # type: ignore[arg-type]


class OOMLoopName(Callback):
    """Marks an out-of-memory error with the loop it came from (``err.lit_gpu_loop``, e.g. "validation"),
    before Lightning resets the trainer's stage: the one-line message names it."""

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if is_out_of_memory(exception) and not hasattr(exception, LOOP_ATTRIBUTE):
            with suppress(AttributeError):  # an exception type with __slots__: the message says "training"
                setattr(exception, LOOP_ATTRIBUTE, loop_words(trainer))


# ---- micro-batches of one step: cutting a batch, delivering its gradients, evaluation put back together
# Evaluation micro-batches run the module's own validation/test/predict step; outputs are concatenated
# (scalars averaged by samples), the step's self.log calls held back and made once with the sample-weighted
# mean, so the logged values equal the whole batch's; an update in a try that ran out of memory is undone.
_BATCHNORM = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
    nn.SyncBatchNorm,
)


def has_batchnorm(module: nn.Module) -> bool:
    """Whether ``module`` contains BatchNorm layers (their statistics depend on the micro-batch)."""
    return any(isinstance(m, _BATCHNORM) for m in module.modules())


class _DeliverGradients(torch.autograd.Function):
    """A loss whose value is given and whose backward returns ``stored * grad_output / scale`` (the
    GradScaler factor the stored gradients carry): what the full batch's backward would give. The stored
    tensors are handed over, not copied (AccumulateGrad adopts them when ``.grad`` is empty)."""

    @staticmethod
    def forward(ctx: Any, value: Tensor, holder: list, scale: Tensor, *params: Tensor) -> Tensor:
        ctx.holder = holder
        ctx.save_for_backward(scale)
        return value.detach().clone()

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        (scale,) = ctx.saved_tensors
        grads = ctx.holder.pop() if ctx.holder else []
        ctx.holder = None
        factor = grad_output.float() / scale
        out = tuple(None if g is None else g.mul_(factor.to(g.dtype)) for g in grads)
        return (None, None, None, *out)


def _cut(batch: Any, start: int, end: int, total: int) -> Any:
    """Samples ``start:end`` of ``batch``: every tensor whose first dimension is the batch is sliced."""
    if start == 0 and end == total:
        return batch
    return apply_to_collection(
        batch, Tensor, lambda t: t[start:end] if t.dim() > 0 and t.shape[0] == total else t
    )


def _loss_of(output: Any) -> Tensor | None:
    if isinstance(output, dict):
        return output.get("loss")
    return output if isinstance(output, Tensor) else None


# ---- evaluation: outputs and logged values of micro-batches ----------------------------------------
def _combine(outputs: list[Any], sizes: list[int]) -> Any:
    """One step's output from its micro-batches' outputs: tensors along dim 0, scalars by sample mean."""
    first = outputs[0]
    if len(outputs) == 1:
        return first
    if isinstance(first, Tensor):
        if first.dim() > 0 and all(o.shape[0] == n for o, n in zip(outputs, sizes, strict=True)):
            return torch.cat(outputs)
        if first.dim() == 0 and first.is_floating_point():
            return _weighted_mean(outputs, sizes)
        return outputs[-1]
    if isinstance(first, dict):
        return type(first)((k, _combine([o[k] for o in outputs], sizes)) for k in first)
    if isinstance(first, list | tuple) and not hasattr(first, "_fields"):
        return type(first)(_combine([o[i] for o in outputs], sizes) for i in range(len(first)))
    if isinstance(first, float):
        return sum(o * n for o, n in zip(outputs, sizes, strict=True)) / sum(sizes)
    return outputs[-1]


def _weighted_mean(values: list[Any], sizes: list[int]) -> Any:
    if all(isinstance(v, Tensor) for v in values):
        total = values[0].float() * sizes[0]
        for value, n in zip(values[1:], sizes[1:], strict=True):
            total = total + value.float() * n
        return (total / sum(sizes)).to(values[0].dtype)
    return sum(float(v) * n for v, n in zip(values, sizes, strict=True)) / sum(sizes)


_LOG_SIGNATURE = inspect.signature(pl.LightningModule.log)
_REDUCE = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}
_REDUCE.update({torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min"})  # type: ignore[dict-item]


class _HeldLogs:
    """The ``self.log`` calls of one evaluation step's micro-batches, made once each when the step is done."""

    def __init__(self, module: pl.LightningModule) -> None:
        self.module = module
        self.calls: dict[str, list[tuple[dict[str, Any], int]]] = {}  # name -> [(arguments, samples)]
        self._attempt: list[tuple[str, dict[str, Any]]] = []

    @contextmanager
    def attempt(self, samples: int) -> Iterator[None]:
        """Hold the ``self.log`` calls made inside; :meth:`keep` them if the micro-batch succeeded."""
        self._attempt = []
        self._samples = samples

        def log(*args: Any, **kwargs: Any) -> None:
            bound = _LOG_SIGNATURE.bind(self.module, *args, **kwargs)
            arguments = dict(bound.arguments)
            arguments.pop("self")
            self._attempt.append((arguments["name"], arguments))

        self.module.log = log  # type: ignore[method-assign]  # log_dict calls self.log too
        try:
            yield
        finally:
            del self.module.__dict__["log"]

    def drop_all(self) -> None:
        self.calls, self._attempt = {}, []

    def keep(self) -> None:
        for name, arguments in self._attempt:
            self.calls.setdefault(name, []).append((arguments, self._samples))
        self._attempt = []

    def commit(self) -> None:
        """Log each name once: the sample-weighted value of its micro-batches (as one whole-batch call)."""
        for calls in self.calls.values():
            arguments, _ = calls[-1]
            value = arguments["value"]
            reduce = _REDUCE.get(arguments.get("reduce_fx", "mean"))  # type: ignore[call-overload]
            if not isinstance(value, Tensor | int | float):  # a torchmetrics object: it holds its own state
                self.module.log(**arguments)
                continue
            if (
                len(calls) == 1 or reduce is None
            ):  # one micro-batch (as without recovery), or a custom reduce_fx
                for each, _ in calls:
                    self.module.log(**each)
                continue
            values = [a["value"] for a, _ in calls]
            if not arguments.get("enable_graph"):
                values = [v.detach() if isinstance(v, Tensor) else v for v in values]
            sizes = [n for _, n in calls]
            combined = _weighted_mean(values, sizes) if reduce == "mean" else _reduce(values, reduce)
            given = [a.get("batch_size") for a, _ in calls]
            batch_size = given[-1]
            if all(g == n for g, n in zip(given, sizes, strict=True)):
                batch_size = sum(sizes)  # batch_size=len(inputs): the whole batch's
            self.module.log(**{**arguments, "value": combined, "batch_size": batch_size})
        self.calls = {}


def _reduce(values: list[Any], how: str) -> Any:
    if not isinstance(values[0], Tensor):
        return {"sum": sum, "max": max, "min": min}[how](values)
    stacked = torch.stack([torch.as_tensor(v, device=values[0].device) for v in values])
    return {"sum": stacked.sum, "max": stacked.amax, "min": stacked.amin}[how](0)


def _metrics(module: nn.Module) -> list[Any]:
    try:
        from torchmetrics import Metric
    except ModuleNotFoundError:
        return []
    return [m for m in module.modules() if isinstance(m, Metric)]


class _MetricGuard:
    """Undoes the torchmetrics updates of a try that ran out of memory (before each try it copies the
    states of the metrics a step of this kind updated last time; all of them the first time)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.metrics = _metrics(module)
        self.watched = list(self.metrics)
        self._counts: list[int] = []

    def step_start(self) -> None:
        self._counts = [m.update_count for m in self.metrics]

    def step_end(self) -> None:
        self.watched = [m for m, n in zip(self.metrics, self._counts, strict=True) if m.update_count != n]

    def snapshot(self) -> list[tuple[Any, dict[str, Any]]]:
        states = [
            (m, {k: v.clone() if isinstance(v, Tensor) else list(v) for k, v in m.metric_state.items()})
            for m in self.watched
        ]
        # a module's own running sums (lit_gpu's LitModule: the epoch's train loss) are undone as well
        mark = getattr(self.module, "train_loss_mark", None)
        if callable(mark):
            states.append((self.module, {"train_loss_mark": mark()}))
        return states

    @staticmethod
    def restore(snapshot: list[tuple[Any, dict[str, Any]]]) -> None:
        for owner, state in snapshot:
            if "train_loss_mark" in state and not hasattr(owner, "metric_state"):
                owner.rewind_train_loss(state["train_loss_mark"])
                continue
            for name, value in state.items():
                setattr(owner, name, value)


#: the variables that configure PyTorch's caching allocator (the second is torch >= 2.9's name for both)


def backward_micro(module: pl.LightningModule, loss: Tensor, scaler: Any) -> None:
    """Back-propagate one micro-batch as Lightning would (fp16 GradScaler, the module's backward hook)."""
    module.backward(scaler.scale(loss) if scaler is not None else loss)


def count_failures(trainer: pl.Trainer, failed: bool) -> int:
    """How many processes ran out of memory; every process gets the same answer (one all-reduce)."""
    if trainer.world_size == 1:
        return int(failed)
    flag = torch.tensor(1.0 if failed else 0.0, device=trainer.strategy.root_device)
    return round(trainer.strategy.reduce(flag, reduce_op="sum").item())


# ---- the callback ----------------------------------------------------------------------------------
class OOMRecovery(OOMLoopName):
    """On out of memory in a step: halve the micro-batch, keep the effective batch (and the metrics), go on.

    Any Trainer and LightningModule with automatic optimization and a mean loss; one device, ``ddp`` (and its
    spawn/fork variants) or lit_gpu's ``dp``. ``micro_batch_size``/``eval_micro_batch_size``: start there
    instead of the whole batch (a checkpoint's value wins on resume); ``expandable_segments``: on CUDA, from
    ``setup`` to ``teardown``, unless ``PYTORCH_CUDA_ALLOC_CONF`` names them.
    """

    def __init__(
        self,
        micro_batch_size: int | None = None,
        eval_micro_batch_size: int | None = None,
        expandable_segments: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("micro_batch_size", micro_batch_size),
            ("eval_micro_batch_size", eval_micro_batch_size),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        self.micro_batch_size = micro_batch_size
        self.eval_micro_batch_size = eval_micro_batch_size
        self.expandable_segments = expandable_segments
        self._expanded = False  # whether setup turned expandable segments on (teardown turns them off)
        self.adaptations = 0
        self._restored = False
        self._announced = False
        self._guards: dict[str, _MetricGuard] = {}

    # ---- state in checkpoints ---------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "micro_batch_size": self.micro_batch_size,
            "eval_micro_batch_size": self.eval_micro_batch_size,
        }

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The micro-batch sizes it halved to: None or a positive int."""
        from lit_gpu.checkpoints import contracts as c

        size = c.optional(c.integer(1, 2**31))
        spec = c.fields({"micro_batch_size": size, "eval_micro_batch_size": size})
        return [c.Contract(("callbacks", self.state_key), spec)]

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        micro = state_dict.get("micro_batch_size")
        if micro is not None:
            self.micro_batch_size = int(micro)
            self._restored = True
            self._announced = False
        eval_micro = state_dict.get("eval_micro_batch_size")
        if eval_micro is not None:
            self.eval_micro_batch_size = int(eval_micro)

    # ---- install / remove the wrapper -------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        strategy = trainer.strategy
        if not isinstance(strategy, SingleDeviceStrategy | DDPStrategy | DataParallelStrategy):
            raise LitGpuError(OOM_RECOVERY_STRATEGY.format(strategy=type(strategy).__name__))
        if stage == "fit":
            if not pl_module.automatic_optimization:
                raise LitGpuError(OOM_RECOVERY_MANUAL_OPTIMIZATION.format(module=type(pl_module).__name__))
            self._wrap(pl_module, "training_step", self._step, trainer)
        for name in EVAL_STEPS.get(stage, ()):
            self._wrap(pl_module, name, self._eval_step, trainer)
        if self.expandable_segments and not self._expanded and strategy.root_device.type == "cuda":
            self._expanded = set_expandable_segments(True)

    def _guard(self, module: pl.LightningModule, kind: str) -> _MetricGuard:
        guard = self._guards.get(kind)
        if guard is None:
            guard = self._guards[kind] = _MetricGuard(module)
        return guard

    def _wrap(
        self, module: pl.LightningModule, name: str, step: Callable[..., Any], trainer: pl.Trainer
    ) -> None:
        """Replace ``module.<name>`` (on the instance) by ``step(trainer, module, original, ...)``."""
        current = module.__dict__.get(name)
        if getattr(current, "_lit_gpu_oom_recovery", None) is self:
            return
        original: Callable[..., Any] = getattr(module, name)

        def wrapped(batch: Any, *args: Any, **kwargs: Any) -> Any:
            return step(trainer, module, original, batch, *args, **kwargs)

        wrapped.__wrapped__ = original  # type: ignore[attr-defined]  # Lightning reads the signature
        wrapped.__doc__ = original.__doc__
        wrapped._lit_gpu_oom_recovery = self  # type: ignore[attr-defined]
        setattr(module, name, wrapped)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after strategy.setup, when trainer.sync_batchnorm has converted the layers
        if trainer.world_size > 1 and any(isinstance(m, nn.SyncBatchNorm) for m in pl_module.modules()):
            raise LitGpuError(OOM_RECOVERY_SYNC_BATCHNORM)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._guards = {}
        if self._expanded:
            set_expandable_segments(False)
            self._expanded = False
        for name in ("training_step", "validation_step", "test_step", "predict_step"):
            if getattr(pl_module.__dict__.get(name), "_lit_gpu_oom_recovery", None) is self:
                del pl_module.__dict__[name]

    # ---- one training step --------------------------------------------------------------------
    def _step(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        original: Callable[..., Any],
        batch: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if not any(cb is self for cb in trainer.callbacks):
            # detached: Lightning's batch-size and LR finders empty trainer.callbacks during their
            # trials, and --tune_batch_size must see its OOMs
            return original(batch, *args, **kwargs)
        total = extract_batch_size(batch)
        batch_idx = args[0] if args else kwargs.get("batch_idx", trainer.fit_loop.epoch_loop.batch_idx)
        params = [p for p in module.parameters() if p.requires_grad]
        # Lightning zeroes the gradients right after training_step on the first batch of an
        # accumulation window; free them now instead (less memory during the step), else set aside.
        window_start = batch_idx % trainer.accumulate_grad_batches == 0
        kept = [None if window_start else p.grad for p in params]
        for p in params:
            p.grad = None
        self._announce_restored(total)

        scaler = getattr(trainer.precision_plugin, "scaler", None)
        held = _HeldLogs(module)  # self.log of the micro-batches: once, for the whole batch
        guard = self._guard(module, "train")
        guard.step_start()
        at_start = guard.snapshot()  # a failed backward starts the batch again: metrics too
        value: Tensor | None = None
        output: Any = None
        done = 0
        while done < total:
            size = min(self.micro_batch_size or total, total - done)
            failed, oom_text = False, None
            out = loss = None
            before = guard.snapshot() if done else at_start
            with held.attempt(size):
                try:
                    out = original(_cut(batch, done, done + size, total), *args, **kwargs)
                    loss = _loss_of(out)
                except Exception as err:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                    if not is_out_of_memory(err):
                        raise
                    failed, oom_text = True, messages.first_line(err)
            failures = count_failures(trainer, failed)
            if failures:
                out = loss = None  # drop this micro-batch's graph before releasing memory
                guard.restore(before)
                self._adapt(trainer, module, size, total, failures, oom_text)
                continue  # gradients of the finished micro-batches stay
            if loss is not None:
                try:
                    backward_micro(module, loss * (size / total), scaler)
                except Exception as err:  # noqa: BLE001
                    if not is_out_of_memory(err):
                        raise
                    failed, oom_text = True, messages.first_line(err)
                failures = count_failures(trainer, failed)
                if failures:
                    out = loss = None
                    for p in params:  # partly written by the failed backward: start the batch again
                        p.grad = None
                    value, output, done = None, None, 0
                    held.drop_all()
                    guard.restore(at_start)
                    self._adapt(trainer, module, size, total, failures, oom_text)
                    continue
                part = loss.detach().float() * (size / total)
                value = part if value is None else value + part
            held.keep()
            output = out
            done += size
        held.commit()
        guard.step_end()

        grads = [p.grad for p in params]
        for p, g in zip(params, kept, strict=True):
            p.grad = g
        if value is None:
            return None  # every micro-batch was skipped (training_step returned None)
        ones = torch.ones((), device=value.device)
        scale = scaler.scale(ones) if scaler is not None else ones  # the factor the stored grads carry
        loss = _DeliverGradients.apply(value, [grads], scale.float(), *params)
        if isinstance(output, dict):
            return {**output, "loss": loss}
        return loss

    # ---- one evaluation step (sanity check, validation, test, predict) ----------------------------
    def _eval_step(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        original: Callable[..., Any],
        batch: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if not any(cb is self for cb in trainer.callbacks):
            return original(batch, *args, **kwargs)  # detached (see _step)
        total = extract_batch_size(batch)
        batch_idx = args[0] if args else kwargs.get("batch_idx", 0)
        guard = self._guard(module, "eval")
        guard.step_start()
        held = _HeldLogs(module)
        outputs: list[Any] = []
        sizes: list[int] = []
        done = 0
        while done < total:
            size = min(self.eval_micro_batch_size or total, total - done)
            snapshot = guard.snapshot()
            failed, oom_text, out = False, None, None
            with held.attempt(size):
                try:
                    out = original(_cut(batch, done, done + size, total), *args, **kwargs)
                except Exception as err:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                    if not is_out_of_memory(err):
                        raise
                    failed, oom_text = True, messages.first_line(err)
            failures = count_failures(trainer, failed)
            if failures:  # this try's logs are dropped and its metric updates undone, on every process
                out = None
                guard.restore(snapshot)
                self._adapt(trainer, module, size, total, failures, oom_text, batch_idx=batch_idx)
                continue
            held.keep()
            outputs.append(out)
            sizes.append(size)
            done += size
        held.commit()
        guard.step_end()
        return _combine(outputs, sizes) if outputs else None

    def _adapt(
        self,
        trainer: pl.Trainer,
        module: pl.LightningModule,
        size: int,
        total: int,
        failures: int,
        oom_text: str | None,
        batch_idx: int | None = None,
    ) -> None:
        """Release the failed attempt's memory and halve the micro-batch, or give up at 1 sample.

        ``batch_idx`` is given for an evaluation step (its own micro-batch), ``None`` for training.
        """
        gc.collect()  # the exception's frames held the failed forward's tensors
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.empty_cache()
        if size <= 1:
            raise torch.OutOfMemoryError(
                oom_text or "CUDA out of memory on another process, even with a micro-batch of 1 sample"
            )
        evaluating = batch_idx is not None
        before = (self.eval_micro_batch_size if evaluating else self.micro_batch_size) or total
        micro = (size + 1) // 2
        if evaluating:
            self.eval_micro_batch_size = micro
        else:
            self.micro_batch_size = micro
        self.adaptations += 1
        was = f"batch {total}" if before >= total else f"batch {total} (micro-batch {before})"
        count = math.ceil(total / micro)
        if evaluating:
            line = OOM_ADAPTED_EVAL.format(
                loop=loop_words(trainer), index=batch_idx, was=was, micro=micro, count=count
            )
        else:
            batch = trainer.fit_loop.epoch_loop.batch_idx + 1  # the batch in progress, counted from 1
            point = messages.fit_point(trainer, batch)
            line = OOM_ADAPTED.format(
                step=trainer.global_step, point=point, was=was, micro=micro, count=count
            )
        if trainer.world_size > 1:
            line += OOM_ADAPTED_PROCESSES.format(world=trainer.world_size, failed=failures)
        if not evaluating and has_batchnorm(module):  # evaluation uses the running statistics
            line += OOM_ADAPTED_BATCHNORM.format(micro=micro, total=total)
        messages.tell(line)

    def _announce_restored(self, total: int) -> None:
        if self._announced:
            return
        self._announced = True
        micro = self.micro_batch_size
        if self._restored and micro and micro < total:
            messages.tell(MICRO_BATCH_FROM_CHECKPOINT.format(micro=micro, count=math.ceil(total / micro)))
