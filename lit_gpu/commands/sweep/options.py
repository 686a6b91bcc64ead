"""The sweep's own flags; everything else on the command line goes to each trial's ``fit``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lit_gpu import messages
from lit_gpu.cli import recipes
from lit_gpu.errors import LitGpuError

SWEEPS_ROOT = "runs/sweeps"
JOURNAL_NAME = "optuna_journal.log"
DEFAULT_TRIALS = 10
NAME_FIX = "pass --study_name NAME, or rename the search file (e.g. space.yaml)"


@dataclass
class SweepOptions:
    """The sweep's own flags (everything else on the command line goes to each trial's ``fit``)."""

    search: str
    n_trials: int = DEFAULT_TRIALS
    until_complete: int | None = None
    storage: str | None = None
    study_name: str | None = None
    root: str = SWEEPS_ROOT
    metric: str = "val/loss"
    direction: str = "minimize"
    pruner: str = "median"
    pruner_startup_trials: int = 5
    gpus_per_trial: int = 0
    seed: int | None = None
    top: int = 5

    @property
    def study(self) -> str:
        """The study name: ``--study_name``, else the search file's stem (``simple`` for simple.yaml)."""
        return self.study_name or Path(self.search).stem

    @property
    def sweep_dir(self) -> Path:
        """``<root>/<study>``: the trials' version folders, the journal, best.yaml and sweep.png."""
        return Path(self.root) / self.study


def build_parser() -> argparse.ArgumentParser:
    """The parser of the sweep's own flags."""
    parser = argparse.ArgumentParser(
        prog="lit-gpu sweep",
        allow_abbrev=False,
        description=(
            "Hyperparameter search with Optuna. Every argument not listed here (--config ..., "
            "--trainer.* ...) is passed to each trial exactly as to lit-gpu fit."
        ),
    )
    add = parser.add_argument
    add(
        "--search",
        required=True,
        help="search space YAML: dotted config key -> {type: float|int|categorical}",
    )
    add(
        "--n_trials",
        type=int,
        default=None,
        help=f"trials this worker runs (default {DEFAULT_TRIALS}; 0: only report)",
    )
    add(
        "--until_complete",
        type=int,
        default=None,
        metavar="N",
        help="instead of --n_trials: run until the study holds N finished trials, however often restarted",
    )
    add("--storage", default=None, help=f"journal file or RDB URL (default <root>/<study>/{JOURNAL_NAME})")
    add("--study_name", default=None, help="study name (default: the search file's name without .yaml)")
    add("--root", default=SWEEPS_ROOT, help=f"folder of the studies' runs (default {SWEEPS_ROOT})")
    add("--metric", default="val/loss", help="logged metric to optimise, reported each validation")
    add("--direction", default="minimize", choices=("minimize", "maximize"))
    add("--pruner", default="median", choices=("median", "none"), help="stop bad trials early")
    add("--pruner_startup_trials", type=int, default=5, help="finished trials before pruning starts")
    add(
        "--gpus_per_trial",
        type=int,
        default=0,
        help="GPUs per trial, most free memory first (0: as configured)",
    )
    add("--seed", type=int, default=None, help="sampler seed; each trial draws with seed + its number")
    add("--top", type=int, default=5, help="rows in the final table of best trials")
    return parser


def _check_count(flag: str, zero: str, value: int) -> None:
    if value < 0:
        raise LitGpuError(messages.SWEEP_BAD_COUNT.format(flag=flag, zero=zero, value=value))


def parse_argv(argv: Sequence[str]) -> tuple[SweepOptions, list[str]]:
    """Split the command line into the sweep's options and the arguments for each trial's ``fit``."""
    args = recipes.resolve_argv(argv)  # --config / --search lit_gpu:NAME -> the shipped file's path
    if args and args[0] == "fit":
        args = args[1:]
    namespace, fit_args = build_parser().parse_known_args(args)
    values = vars(namespace)
    if values["n_trials"] is not None and values["until_complete"] is not None:
        raise LitGpuError(messages.SWEEP_TWO_BUDGETS)
    if values["n_trials"] is None:
        values["n_trials"] = DEFAULT_TRIALS
    options = SweepOptions(**values)
    _check_count("--n_trials", "only report", options.n_trials)
    if options.until_complete is not None:
        _check_count("--until_complete", "only report", options.until_complete)
    _check_count("--gpus_per_trial", "as configured", options.gpus_per_trial)
    if options.study_name is not None:
        check_name(options.study_name, "--study_name", "pass a name without / such as my_study")
    else:
        check_name(options.study, f"the study name taken from --search {options.search!r}", NAME_FIX)
    return options, fit_args


# ---- names that become path components (a study name) ---------------------------------------------
MAX_NAME = 200
BAD_NAME = "{what} {name} is not a plain name ({why}); {fix}"


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be one path component, or ``None`` when it can."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if name in (".", ".."):
        return "it is . or .."
    if any(sep in name for sep in ("/", "\\", "\0")):
        return "it holds a path separator"
    if len(name) <= MAX_NAME and messages.shown(name, limit=MAX_NAME + 1) != name:
        return "it holds control or invisible characters"
    if len(name) > MAX_NAME:
        return f"it is longer than {MAX_NAME} characters"
    return None


def check_name(name: object, what: str, fix: str) -> str:
    """``name`` when it is a plain name (:func:`name_problem`); else one line with ``what`` and ``fix``."""
    why = name_problem(name)
    if why is not None:
        shown = messages.shown(repr(name) if isinstance(name, str) else name, limit=80)
        raise LitGpuError(BAD_NAME.format(what=what, name=shown, why=why, fix=fix))
    return name  # type: ignore[return-value]
