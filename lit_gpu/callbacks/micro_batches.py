"""Micro-batches of one step: cutting a batch, delivering its gradients, and evaluation put back together.

The pieces :class:`lit_gpu.callbacks.oom_recovery.OOMRecovery` runs a step with.

Evaluation (the sanity check, validation, test and predict, in ``fit`` and in the ``validate``,
``test`` and ``predict`` commands) is split the same way, with its own micro-batch
(``eval_micro_batch_size``; no gradients, so usually larger than the training one). Each micro-batch
runs the module's own ``validation_step`` / ``test_step`` / ``predict_step``; the outputs are put back
together (tensors of the micro-batches concatenated along dim 0, scalars averaged by samples), and the
``self.log`` calls of the step are held back until every micro-batch is done, then made once per name
with the sample-weighted mean (``reduce_fx`` ``mean``; ``sum``, ``max`` and ``min`` as named), so the
logged values and the epoch metrics equal the whole-batch ones. torchmetrics objects accumulate over
the micro-batches as over batches; a try that ran out of memory after updating one is undone (its
state is restored). Other state a step keeps by itself (e.g. a list of outputs) sees every
successful micro-batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning.pytorch as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor, nn

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
    """A loss whose value is given and whose backward hands precomputed gradients to the parameters.

    ``backward`` returns ``stored * grad_output / scale``: exactly what a backward of the real
    full-batch loss would produce for the same incoming gradient (``scale`` is the GradScaler factor
    the stored gradients already carry, 1 without one). The stored tensors are handed over, not
    copied, so AccumulateGrad adopts them when ``.grad`` is empty.
    """

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
    """Undoes the torchmetrics updates of a try that ran out of memory.

    Before each try it copies the states of the metrics a step of this kind updated last time (all of
    them the first time): on a GPU a step pays for the copies of the metrics it really uses, not more.
    """

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
