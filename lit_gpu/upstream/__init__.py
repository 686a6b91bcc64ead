"""What lit_gpu reaches in its upstreams (Lightning, torch, torchmetrics, jsonargparse, optuna): one table
and its gate, a few accessors here, and the shims not yet beside their users.

* ``table``: every private upstream name lit_gpu reaches, by feature, with the lit_gpu modules that may reach
  it (its users, wherever they sit) and the tests that pin it; the digest of every Lightning function lit_gpu
  mirrors (model: Lightning's ``fabric/utilities/imports.py``). tests/unit/upstream/test_declared.py lints
  the source against it.
* ``gate``: the check at run time. On a mismatch that feature alone stands aside with one line, once per
  process, and stock Lightning runs; a feature that keeps a promise says it cannot stand aside, and its
  test is the judge.

  Gated features (the keys of ``table.FEATURES``; * keeps a promise, it cannot stand aside): fast path;
  capture; fresh last; removal guard*; whole steps*; exact resume*; logging state; validation steps; hook
  name; anomaly check; allocator setting; scheduler children; interrupt*; loader replay*; cluster resume*;
  torch zip reader*; config reading*; sweep trial ids*; step log check; dp*; one-subcommand parse; config
  decides*; own CLI path*.
* accessors here (``loggers_record_this_step``, ``detect_anomaly``, ``given_hyperparameters``,
  ``restricted_classmethod``); shims, each for the users the table names: ``loops``, ``logging_state``,
  ``train_loaders``, ``cluster``, ``strategy``, ``cli``, ``tools``, ``torch_hooks``, ``torch_reader``.

The fast path (lit_gpu's lean training loop) is its own package, :mod:`lit_gpu.fastpath`. Importing this
package imports neither torch nor Lightning; each module imports what it uses.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``restricted_classmethod``: Lightning's class-only classmethod (``model.load_from_checkpoint(...)`` on
    an instance raises), which lit_gpu's LitModule.load_from_checkpoint keeps; loaded on first use, so that
    the room's accessors import no Lightning (pinned by test_model_helpers__restricted_classmethod)."""
    if name == "restricted_classmethod":
        from lightning.pytorch.utilities.model_helpers import _restricted_classmethod

        return _restricted_classmethod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def given_hyperparameters() -> Any:
    """The init args LightningCLI is instantiating the current module with (a mapping), else None.

    Pinned by test_hparams_mixin__given_hyperparameters: no public API gives the CLI config there.
    """
    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters

    return _given_hyperparameters.get()


def loggers_record_this_step(trainer: Any) -> bool:
    """Whether the loggers record the current training step (``log_every_n_steps``); True without a trainer.

    Pinned by test_trainer__logger_connector_should_update_logs: no public API says it.
    """
    from lightning.pytorch.trainer.states import RunningStage

    from lit_gpu.upstream.gate import stands_aside

    connector = getattr(trainer, "_logger_connector", None)
    if connector is None or stands_aside("step log check"):  # aside: Lightning keeps what its loggers record
        return True
    if trainer.state.stage is RunningStage.TRAINING:  # the fit loop's case, without its enum comparisons
        every = trainer.log_every_n_steps  # (the property's source is pinned: MIRRORED_SOURCE)
        if every == 0:
            return False
        return (trainer.fit_loop.epoch_loop._batches_that_stepped + 1) % every == 0 or trainer.should_stop
    return bool(connector.should_update_logs)


def detect_anomaly(trainer: Any) -> bool:
    """Whether the trainer runs autograd's anomaly detection (``Trainer(detect_anomaly=True)``).

    Pinned by test_trainer__detect_anomaly: the Trainer keeps the flag in a private attribute only.
    """
    from lit_gpu.upstream.gate import stands_aside

    if stands_aside("anomaly check"):  # aside: the NaN guard runs whatever the flag says
        return False
    return bool(getattr(trainer, "_detect_anomaly", False))


__all__ = [
    "detect_anomaly",
    "given_hyperparameters",
    "loggers_record_this_step",
    "restricted_classmethod",
]
