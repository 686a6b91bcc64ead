"""The one runtime gate of lit_gpu's fast path: checked at the start of each fit, before any patch.

The fast path (:class:`~lit_gpu.upstream.step_path.LeanOptimizerStep`,
:class:`~lit_gpu.upstream.batch_path.LeanTrainingBatch`, :class:`~lit_gpu.upstream.step_path.SkipIdleHooks`
and the whole-step capture) reproduces pieces of Lightning's training loop. It runs only where the
installed Lightning is one it was verified on:

* a release no newer than :data:`VERIFIED_UP_TO` (moved by whoever re-runs Lightning's own tests with
  lit_gpu's callbacks, ``.ci/lightning_tests.py``, on a new release);
* the source of every Lightning function it mirrors unchanged (:data:`MIRRORED_SOURCES`: a digest
  per group, the same on Lightning 2.6.0 to 2.6.6);
* every private name it reads present, on the classes and on this fit's objects (:data:`PRIVATE_NAMES`).

On any mismatch the whole fast path stands aside for the fit and says why in one line, once per
process; the rest of lit_gpu runs on stock Lightning.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl

from lit_gpu import messages

#: the newest Lightning release the fast path was verified on (Lightning's own tests: .ci/lightning_tests.py)
VERIFIED_UP_TO = "2.6.6"

#: group -> SHA-256 (16 hex digits) of its functions' source as ``inspect.getsource`` gives them
MIRRORED_SOURCES = {"batch": "dec8ec47eb407ddb", "step": "eeab579497d2d8db"}

#: private attributes the room reads on Lightning's classes: "module:Class" -> names
PRIVATE_NAMES: dict[str, tuple[str, ...]] = {
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop": (
        "_build_kwargs", "_should_check_val_fx", "_should_accumulate", "_num_ready_batches_reached",
        "_is_training_done", "_is_validation_done",
    ),
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization": ("run",),
    "lightning.pytorch.loops.optimization.closure:AbstractClosure": ("consume_result",),
    "lightning.pytorch.trainer.connectors.logger_connector.result:_ResultCollection": ("log", "metrics"),
    "lightning.pytorch.trainer.connectors.logger_connector.result:_ResultMetric": ("to",),
}  # fmt: skip

#: private attributes the room reads on a fit's objects: a path from the trainer
FIT_PRIVATE_NAMES = (
    "fit_loop._combined_loader",
    "fit_loop.epoch_loop._results",
    "fit_loop.epoch_loop._batches_that_stepped",
    "fit_loop.epoch_loop.automatic_optimization._skip_backward",
    "fit_loop.epoch_loop.automatic_optimization.optim_progress",
    "strategy._lightning_optimizers",
    "_logger_connector",
    "_signal_connector",
    "_data_connector._datahook_selector",
    "_detect_anomaly",
)


def batch_mirrored() -> list[Any]:
    """The Lightning functions whose behaviour the lean batch (``batch_path._LeanBatch``) reproduces."""
    from lightning.pytorch.loops.fetchers import _DataFetcher, _PrefetchDataFetcher
    from lightning.pytorch.loops.loop import _Loop
    from lightning.pytorch.loops.progress import _OptimizationProgress, _Progress
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
    from lightning.pytorch.loops.utilities import _is_max_limit_reached
    from lightning.pytorch.trainer.connectors.logger_connector.logger_connector import _LoggerConnector
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection, _ResultMetric
    from lightning.pytorch.utilities.combined_loader import CombinedLoader, _MaxSizeCycle

    return [
        _TrainingEpochLoop.advance,
        _TrainingEpochLoop.on_advance_end,
        _TrainingEpochLoop._should_check_val_fx,
        _TrainingEpochLoop._should_accumulate,
        _LoggerConnector.on_batch_start,
        _LoggerConnector.on_batch_end,
        _LoggerConnector.update_train_step_metrics,
        _LoggerConnector.should_update_logs.fget,
        _ResultCollection.metrics,
        # the epoch loop's run and its stop test (_LeanBatch.run)
        _TrainingEpochLoop.run,
        _TrainingEpochLoop.done.fget,
        _TrainingEpochLoop._is_training_done.fget,
        _TrainingEpochLoop._is_validation_done.fget,
        _TrainingEpochLoop.global_step.fget,
        _OptimizationProgress.optimizer_steps.fget,
        _TrainingEpochLoop._num_ready_batches_reached,
        _TrainingEpochLoop.reset_restart_stage,
        _Loop.on_iteration_done,
        _Loop.restarting.fset,
        _is_max_limit_reached,
        pl.Trainer.num_training_batches.fget,
        pl.Trainer.received_sigterm.fget,
        # the progress counters (_LeanBatch.advance moves them itself)
        _Progress.increment_ready,
        _Progress.increment_started,
        _Progress.increment_processed,
        _Progress.increment_completed,
        # the fetch from a sized loader (_LeanBatch._fetch)
        _PrefetchDataFetcher.__next__,
        _DataFetcher.__next__,
        CombinedLoader.__next__,
        _MaxSizeCycle.__next__,
        # a value logged again (_LeanLog)
        _ResultCollection.log,
        _ResultCollection.update_metrics,
        _ResultCollection._extract_batch_size,
        _ResultMetric.to,
    ]


def _step_mirrored() -> list[Callable[..., Any]]:
    """The Lightning functions whose behaviour the lean optimizer step and the capture reproduce."""
    from lightning.pytorch.core.module import LightningModule
    from lightning.pytorch.core.optimizer import LightningOptimizer
    from lightning.pytorch.loops.optimization.automatic import Closure, _AutomaticOptimization
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.strategies import Strategy

    return [
        _AutomaticOptimization.run,
        _AutomaticOptimization._make_closure,
        _AutomaticOptimization._make_step_fn,
        _AutomaticOptimization._make_zero_grad_fn,
        _AutomaticOptimization._make_backward_fn,
        _AutomaticOptimization._optimizer_step,
        _AutomaticOptimization._optimizer_zero_grad,
        _AutomaticOptimization._training_step,
        Closure.closure,
        _TrainingEpochLoop._build_kwargs,
        LightningOptimizer.step,
        LightningModule.optimizer_step,
        LightningModule.optimizer_zero_grad,
        LightningModule.backward,
        Strategy.optimizer_step,
        Strategy.training_step,
        Strategy.backward,
        Precision.optimizer_step,
        Precision._wrap_closure,
        Precision.backward,
    ]


def _mirrored_groups() -> dict[str, Callable[[], list[Callable[..., Any]]]]:
    return {"batch": batch_mirrored, "step": _step_mirrored}


def source_digest(functions: list[Callable[..., Any]]) -> str:
    """SHA-256 (16 hex digits) of the functions' source; "" if one cannot be read."""
    try:
        text = "\n".join(inspect.getsource(fn) for fn in functions)
    except (OSError, TypeError):
        return ""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@functools.cache
def release_problem() -> str | None:
    """What about the installed Lightning (release, mirrored source, class attributes) keeps the fast path
    off, or None. Computed once per process."""
    import lightning

    version = lightning.__version__
    if _version_tuple(version) > _version_tuple(VERIFIED_UP_TO):
        return f"Lightning {version} is newer than {VERIFIED_UP_TO}, the newest it was verified on"
    for group, make in _mirrored_groups().items():
        if source_digest(make()) != MIRRORED_SOURCES[group]:
            return f"Lightning {version}'s training {group} code differs from the code it mirrors"
    for where, names in PRIVATE_NAMES.items():
        module_name, class_name = where.split(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            return f"Lightning {version} has no {module_name}.{class_name}"
        missing = [name for name in names if not hasattr(cls, name)]
        if missing:
            return f"Lightning {version}'s {class_name} has no {', '.join(missing)}"
    return None


def _fit_problem(trainer: Any) -> str | None:
    for path in FIT_PRIVATE_NAMES:
        obj = trainer
        for name in path.split("."):
            if not hasattr(obj, name):
                return f"this fit's trainer has no {path}"
            obj = getattr(obj, name)
    return None


_told: set[str] = set()


def fast_path_problem(trainer: Any) -> str | None:
    """Why this fit runs stock Lightning (the reason is told once per process), or None: the gate."""
    problem = release_problem() or _fit_problem(trainer)
    if problem is not None and problem not in _told:
        _told.add(problem)
        messages.tell(messages.FAST_PATH_ASIDE.format(reason=problem))
    return problem
