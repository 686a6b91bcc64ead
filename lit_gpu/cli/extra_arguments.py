"""The arguments ``lit-gpu`` adds to LightningCLI's: ``--nan_guard.*``, ``--predict_out``, ``--loggers``...

Added on lit_gpu's own path (:meth:`LitGpuCLI._lit_gpu_arguments`), not in ``add_arguments_to_parser``,
which stays the user's: a subclass overriding it without ``super()`` still gets them.
"""

from __future__ import annotations

from typing import Literal

from lightning.pytorch.cli import LightningArgumentParser

from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.callbacks.progress import DEFAULT_INTERVAL
from lit_gpu.cli import fresh_optimizer


def has_option(parser: LightningArgumentParser, key: str) -> bool:
    """Whether ``parser`` has the option ``key`` (``"trainer.callbacks"``): a ``trainer_class`` (a factory, a
    Trainer subclass with a narrower ``__init__``) decides which ``trainer.*`` options exist."""
    try:
        parser.get_default(key)
    except KeyError:  # jsonargparse's NSKeyError: "No action for key ..."
        return False
    return True


def add_extra_arguments(parser: LightningArgumentParser) -> None:
    """Add ``nan_guard``, ``--predict_out``, ``--tune_batch_size``, ``--oom_recovery`` and ``free_gpus``."""
    parser.add_lightning_class_args(NaNGuard, "nan_guard")
    parser.add_argument(
        "--predict_out",
        type=str | None,
        default=None,
        help="predict only: CSV file for the predictions (index,prediction,probability for classifiers); "
        "default: predictions.csv in the evaluation's folder (RUN/evaluations/predict_K/), or in the "
        "working folder without lit_gpu's loggers",
    )
    parser.add_argument(
        "--tune_batch_size",
        type=bool,
        default=False,
        help="fit only: find the largest data.batch_size that fits in memory (Lightning's Tuner) first",
    )
    parser.add_argument(
        "--oom_recovery",
        type=bool,
        default=False,
        help="on out of memory in any loop (training, sanity check, validation, test, predict), halve the "
        "micro-batch and retry the step (same effective batch, same metrics)",
    )
    parser.add_argument(
        "--progress_interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help="when the output is not a terminal (a batch job's log): seconds between progress lines "
        "(0: one line at each epoch end only)",
    )
    parser.add_argument(
        "--progress_format",
        type=Literal["text", "json"],
        default="text",
        help="progress lines when the output is not a terminal: text, or json (one JSON object a line, "
        "also on a terminal)",
    )
    parser.add_argument(
        "--free_gpus",
        type=list[dict[str, int | str]] | None,
        default=None,
        help="written by lit-gpu (ignored on input): the physical GPUs 'devices: free:N' chose, "
        "one per local rank",
    )
    fresh_optimizer.add_argument(parser)  # --fresh_optimizer
