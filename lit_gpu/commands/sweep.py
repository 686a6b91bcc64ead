"""``lit-gpu sweep``: hyperparameter search with Optuna over the same configs as ``lit-gpu fit``.

    lit-gpu sweep --config configs/simple.yaml --search configs/sweeps/simple.yaml --n_trials 20

Every trial is a normal ``lit-gpu fit`` run (the user's configs and flags, then ``--key=value`` for the
sampled parameters) logging to ``runs/sweeps/<study>/version_<trial number>/`` with its ``config.yaml``
and checkpoints, so it can be re-run or resumed with the usual commands. The study lives in an Optuna
storage: by default a journal file next to the runs (several workers on one machine, or on a shared
filesystem), or an RDB URL (``sqlite:///...``, ``postgresql://...``) for workers on many machines.
Starting the same command again adds ``--n_trials`` more trials to the study; starting it N times in
parallel makes N workers that share it. A trial that crashes is recorded as failed and the sweep goes
on; :class:`SweepPruning` reports ``--metric`` after each validation and stops trials the pruner
rejects. At the end: a table of the best trials, ``best.yaml`` (the best trial's full config, for
``lit-gpu fit --config best.yaml``) and ``sweep.png`` (optimization history, parameter importances).

Single-process trials run inside the sweep process (no start-up cost). Trials that need several
processes (``--gpus_per_trial 2``, ``trainer.devices: 2``, a DDP strategy) run as a child
``python -m lit_gpu sweep`` process, so that Lightning's DDP launcher re-runs that child, not the
sweep; the child reads its trial from the ``LIT_GPU_SWEEP_TRIAL`` environment variable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import yaml
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.commands.sweep_space import SearchSpace, format_value, load_space
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import tell
from lit_gpu.translate import explain

SWEEPS_ROOT = "runs/sweeps"
JOURNAL_NAME = "optuna_journal.log"
TRIAL_ENV = "LIT_GPU_SWEEP_TRIAL"
RESULT_NAME = "sweep_trial.json"
ERROR_NAME = "sweep_error.txt"
RDB_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "oracle", "mssql")
PLOT_FIGSIZE = (12.0, 4.5)  # inches, as `lit-gpu plot`
PLOT_DPI = 100


@dataclass
class SweepOptions:
    """The sweep's own flags (everything else on the command line goes to each trial's ``fit``)."""

    search: str
    n_trials: int = 10
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
    add("--n_trials", type=int, default=10, help="trials this worker runs (default 10; 0: only report)")
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
    add("--seed", type=int, default=None, help="sampler seed (give each parallel worker its own)")
    add("--top", type=int, default=5, help="rows in the final table of best trials")
    return parser


def parse_argv(argv: Sequence[str]) -> tuple[SweepOptions, list[str]]:
    """Split the command line into the sweep's options and the arguments for each trial's ``fit``."""
    args = list(argv)
    if args and args[0] == "fit":
        args = args[1:]
    namespace, fit_args = build_parser().parse_known_args(args)
    options = SweepOptions(**vars(namespace))
    if options.n_trials < 0:
        raise LitGpuError(
            messages.SWEEP_BAD_COUNT.format(flag="--n_trials", zero="only report", value=options.n_trials)
        )
    if options.gpus_per_trial < 0:
        zero, value = "as configured", options.gpus_per_trial
        raise LitGpuError(messages.SWEEP_BAD_COUNT.format(flag="--gpus_per_trial", zero=zero, value=value))
    return options, fit_args


# ---- storage, study, pruner --------------------------------------------------------------------
def make_storage(spec: str | None, sweep_dir: Path) -> Any:
    """An Optuna storage: an RDB for ``scheme://`` URLs, else a journal file (default in ``sweep_dir``)."""
    import optuna

    if spec and "://" in spec:
        scheme = spec.split("://", 1)[0].split("+", 1)[0].lower()
        if scheme not in RDB_SCHEMES:
            raise LitGpuError(messages.SWEEP_UNKNOWN_STORAGE.format(spec=spec, scheme=scheme))
        return optuna.storages.RDBStorage(spec)
    path = Path(spec) if spec else sweep_dir / JOURNAL_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def make_pruner(name: str, startup_trials: int) -> Any:
    """Optuna's MedianPruner (``median``) or no pruning (``none``)."""
    import optuna

    if name == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=0)


def open_study(options: SweepOptions) -> Any:
    """Create the study, or load it when it exists (same name and storage: the sweep continues)."""
    import optuna

    storage = make_storage(options.storage, options.sweep_dir)
    study = optuna.create_study(
        study_name=options.study,
        storage=storage,
        sampler=optuna.samplers.TPESampler(seed=options.seed),
        pruner=make_pruner(options.pruner, options.pruner_startup_trials),
        direction=options.direction,
        load_if_exists=True,
    )
    if study.direction.name.lower() != options.direction:
        direction = study.direction.name.lower()
        raise LitGpuError(messages.SWEEP_OTHER_DIRECTION.format(study=options.study, direction=direction))
    metric = study.user_attrs.get("metric")
    if metric is None:
        study.set_user_attr("metric", options.metric)
    elif metric != options.metric:
        raise LitGpuError(
            messages.SWEEP_OTHER_METRIC.format(study=options.study, metric=metric, given=options.metric)
        )
    return study


# ---- pruning -----------------------------------------------------------------------------------
class SweepPruning(Callback):
    """Reports ``metric`` to an Optuna trial after every validation; stops the fit when it is pruned.

    Step ``k`` is the ``k``-th validation of the run (sanity checks excluded). Only global rank 0 talks
    to the storage; under DDP its decision is broadcast so that every rank stops together. Stopping
    sets ``trainer.should_stop`` (the fit ends normally and leaves its ``last.ckpt``); the sweep then
    records the trial as pruned.

    Args:
        trial: The ``optuna.Trial`` (``None`` on ranks other than 0, or when ``connect`` is given).
        metric: Key in ``trainer.callback_metrics``, e.g. ``val/loss``.
        connect: ``{"storage", "study", "trial_id", "pruner", "startup"}`` to load the trial from
            storage on rank 0 (trials run in a child process).
    """

    def __init__(self, trial: Any, metric: str, connect: dict[str, Any] | None = None) -> None:
        self.trial = trial
        self.metric = metric
        self.connect = connect
        self.reports = 0
        self.last_value: float | None = None
        self.pruned_at: int | None = None
        self.logged: list[str] = []

    def _rank_zero_trial(self) -> Any:
        if self.trial is None and self.connect is not None:
            import optuna

            spec = self.connect
            study = optuna.load_study(
                study_name=spec["study"],
                storage=make_storage(spec["storage"], Path(spec["sweep_dir"])),
                pruner=make_pruner(spec["pruner"], spec["startup"]),
            )
            self.trial = optuna.trial.Trial(study, spec["trial_id"])
        return self.trial

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.logged = sorted(trainer.callback_metrics)
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            return
        self.last_value = float(value)
        step, self.reports = self.reports, self.reports + 1
        prune = False
        if trainer.is_global_zero:
            trial = self._rank_zero_trial()
            if trial is not None:
                trial.report(self.last_value, step)
                prune = bool(trial.should_prune())
        if trainer.world_size > 1:
            prune = bool(trainer.strategy.broadcast(prune, src=0))
        if prune:
            self.pruned_at = step
            trainer.should_stop = True

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.logged:  # no validation ran: say what was logged at all
            self.logged = sorted(trainer.callback_metrics)


# ---- running one trial -------------------------------------------------------------------------
@dataclass
class TrialResult:
    """What a trial's fit left: the last value of the metric, whether it was pruned, or an error."""

    value: float | None = None
    pruned_at: int | None = None
    logged: list[str] | None = None
    error: str | None = None
    interrupted: bool = False


class _TrialFailed(Exception):
    """A trial crashed; the sweep records it as failed and goes on."""


class _StopSweep(Exception):
    """Ctrl+C in a trial: record the trial failed and end the sweep."""


def _describe_error(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"exited with status {err.code} (the error is printed above)"
    message = explain(err) if isinstance(err, Exception) else None
    if message:
        return message
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _trial_cli(args: list[str], callback: SweepPruning) -> Any:
    """Run ``lit-gpu fit`` with ``args`` in this process, ``callback`` added to the Trainer."""
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    class TrialCLI(LitGpuCLI):
        @override
        def instantiate_trainer(self, **kwargs):
            trainer = super().instantiate_trainer(**kwargs)
            trainer.callbacks.append(callback)
            return trainer

    return TrialCLI(args=args)


def run_in_process(args: list[str], trial: Any, metric: str, run_dir: Path) -> TrialResult:
    """One single-process trial inside the sweep process."""
    from lit_gpu.callbacks.interrupt import is_signal_stop

    callback = SweepPruning(trial, metric)
    try:
        _trial_cli(args, callback)
    except (Exception, SystemExit) as err:
        if is_signal_stop(err):
            return TrialResult(error="interrupted", interrupted=True)
        _write_error(run_dir)
        return TrialResult(error=_describe_error(err))
    except KeyboardInterrupt:
        return TrialResult(error="interrupted", interrupted=True)
    return TrialResult(callback.last_value, callback.pruned_at, callback.logged)


def _write_error(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / ERROR_NAME).write_text(traceback.format_exc())


def run_in_child(args: list[str], trial: Any, options: SweepOptions, run_dir: Path) -> TrialResult:
    """One trial in a child ``python -m lit_gpu sweep`` process (needed for multi-process trials)."""
    result_path = run_dir / RESULT_NAME
    with contextlib.suppress(FileNotFoundError):
        result_path.unlink()
    spec = {
        "args": args,
        "metric": options.metric,
        "result": str(result_path),
        "connect": {
            "storage": options.storage,
            "sweep_dir": str(options.sweep_dir),
            "study": options.study,
            "trial_id": trial._trial_id,
            "pruner": options.pruner,
            "startup": options.pruner_startup_trials,
        },
    }
    env = {**os.environ, TRIAL_ENV: json.dumps(spec)}
    proc = subprocess.Popen([sys.executable, "-m", "lit_gpu", "sweep"], env=env)
    try:
        returncode = proc.wait()
    except KeyboardInterrupt:  # the child got the same Ctrl+C: let it save its last.ckpt
        proc.wait()
        return TrialResult(error="interrupted", interrupted=True)
    if result_path.is_file():
        result = TrialResult(**json.loads(result_path.read_text()))
        if returncode == 0 or result.error:
            return result
    if returncode == 130:
        return TrialResult(error="interrupted", interrupted=True)
    return TrialResult(error=f"the trial process exited with status {returncode} (its error is above)")


def run_trial_child(spec: dict[str, Any]) -> int:
    """Body of the child process started by :func:`run_in_child` (and of its DDP ranks)."""
    callback = SweepPruning(None, spec["metric"], connect=spec["connect"])
    rank = int(os.environ.get("LOCAL_RANK", "0")) + int(os.environ.get("NODE_RANK", "0"))
    result_path = Path(spec["result"])
    try:
        _trial_cli(list(spec["args"]), callback)
    except (Exception, SystemExit) as err:
        from lit_gpu.callbacks.interrupt import is_signal_stop

        if is_signal_stop(err):
            return 130
        if rank == 0:
            _write_error(result_path.parent)
            _write_json(result_path, asdict(TrialResult(error=_describe_error(err))))
        return 1
    if rank == 0:
        result = TrialResult(callback.last_value, callback.pruned_at, callback.logged)
        _write_json(result_path, asdict(result))
    return 0


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# ---- devices -----------------------------------------------------------------------------------
def _device_count(devices: Any, accelerator: Any) -> int:
    """How many processes ``trainer.devices`` starts (``0``: unknown, treat as several)."""
    if isinstance(devices, bool):
        return 0
    if isinstance(devices, int):
        return devices if devices > 0 else 0
    if isinstance(devices, list | tuple):
        return len(devices)
    text = str(devices).strip().lower()
    if text.startswith("free:"):
        return int(text.split(":", 1)[1] or 0)
    if text == "auto":
        if str(accelerator).lower() == "cpu":
            return 1
        from lightning.fabric.accelerators.cuda import num_cuda_devices

        return max(1, num_cuda_devices())
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) == 1 and parts[0].strip().isdigit() and "," not in text:
        return int(parts[0])
    return len(parts) if all(p.strip().isdigit() for p in parts) else 0


def needs_child_process(trainer_config: Any, gpus_per_trial: int) -> bool:
    """Whether a trial starts several processes (DDP & co.), so must not run inside the sweep."""
    get = trainer_config.get
    strategy = str(get("strategy", "auto") or "auto").lower()
    if gpus_per_trial > 1 or int(get("num_nodes", 1) or 1) > 1:
        return True
    if any(name in strategy for name in ("ddp", "fsdp", "deepspeed", "spawn", "fork")):
        return True
    if gpus_per_trial == 1:
        return False
    return _device_count(get("devices", "auto"), get("accelerator", "auto")) != 1


class GpuClaims:
    """Spreads the workers of one machine over its GPUs: claims in ``<folder>/gpu_claims/``.

    Each trial takes the ``k`` GPUs that the fewest live workers on this host hold, most free memory
    first (:func:`lit_gpu.devices.pick_free_gpus`), under a file lock.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder / "gpu_claims"
        self.host = socket.gethostname()
        self.mine = self.folder / f"{self.host}@{os.getpid()}.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _held_by_others(self) -> dict[int, int]:
        held: dict[int, int] = {}
        for path in self.folder.glob(f"{self.host}@*.json"):
            if path == self.mine:
                continue
            pid = int(path.stem.rsplit("@", 1)[1])
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                path.unlink(missing_ok=True)  # a worker that died without releasing
                continue
            except PermissionError:
                pass
            with contextlib.suppress(OSError, ValueError):
                for ordinal in json.loads(path.read_text()):
                    held[int(ordinal)] = held.get(int(ordinal), 0) + 1
        return held

    def claim(self, k: int) -> list[int]:
        """CUDA ordinals for the next trial of this worker."""
        from lit_gpu.devices import pick_free_gpus, visible_gpus

        with self._locked():
            pick_free_gpus(k)  # the usual one-line error when fewer than k GPUs are visible
            by_free = pick_free_gpus(len(visible_gpus()))
            held = self._held_by_others()
            chosen = sorted(by_free, key=lambda o: (held.get(o, 0), by_free.index(o)))[:k]
            self.mine.write_text(json.dumps(chosen))
        return chosen

    def release(self) -> None:
        """Drop this worker's claim."""
        self.mine.unlink(missing_ok=True)


# ---- the objective -----------------------------------------------------------------------------
def _short_names(keys: Sequence[str]) -> dict[str, str]:
    """Shortest unambiguous dotted suffix of each key (``...optimizer.init_args.lr`` -> ``lr``)."""
    names: dict[str, str] = {}
    for key in keys:
        parts = [p for p in key.split(".") if p != "init_args"]
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            others = [k for k in keys if k != key]
            if not any(".".join([p for p in k.split(".") if p != "init_args"][-n:]) == name for k in others):
                break
        names[key] = name
    return names


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def logger_flag(sweep_dir: Path, number: int) -> str:
    """``--trainer.logger=...``: a CSVLogger writing to ``<sweep_dir>/version_<number>``."""
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(sweep_dir.parent), "name": sweep_dir.name, "version": number},
    }
    return f"--trainer.logger={json.dumps(logger)}"


class Objective:
    """Optuna objective: sample, run one ``fit``, return the last value of the metric."""

    def __init__(self, options: SweepOptions, space: SearchSpace, fit_args: list[str], child: bool) -> None:
        self.options, self.space, self.fit_args, self.child = options, space, fit_args, child
        self.names = _short_names([p.key for p in space.params])
        self.claims = GpuClaims(options.sweep_dir) if options.gpus_per_trial else None
        self.interrupted = False

    def trial_args(self, values: dict[str, Any], number: int, gpus: list[int] | None) -> list[str]:
        """The ``fit`` arguments of one trial."""
        args = ["fit", *self.fit_args, *self.space.flags(values), logger_flag(self.options.sweep_dir, number)]
        args.append("--checkpoint.dirpath=null")  # checkpoints in the trial's own folder, never shared
        if gpus is not None:
            args += ["--trainer.accelerator=gpu", f"--trainer.devices={format_value(gpus)}"]
        return args

    def __call__(self, trial: Any) -> float:
        import optuna

        values = self.space.sample(trial)
        run_dir = self.options.sweep_dir / f"version_{trial.number}"
        gpus = self.claims.claim(self.options.gpus_per_trial) if self.claims else None
        args = self.trial_args(values, trial.number, gpus)
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("params", {k: values[k] for k in values})
        trial.set_user_attr("args", args)
        shown = ", ".join(f"{self.names[k]}={_fmt(v)}" for k, v in values.items())
        where = f" on GPU {','.join(map(str, gpus))}" if gpus else ""
        tell(messages.SWEEP_TRIAL_START.format(number=trial.number, params=shown, gpus=where, folder=run_dir))
        try:
            if self.child:
                result = run_in_child(args, trial, self.options, run_dir)
            else:
                result = run_in_process(args, trial, self.options.metric, run_dir)
        finally:
            if self.claims:
                self.claims.release()
        metric = self.options.metric
        if result.interrupted:
            self.interrupted = True
            raise _StopSweep
        if result.error:
            trial.set_user_attr("error", result.error)
            tell(messages.SWEEP_TRIAL_FAILED.format(number=trial.number, reason=result.error))
            raise _TrialFailed(result.error)
        if result.pruned_at is not None:
            value = _fmt(result.value)
            tell(
                messages.SWEEP_TRIAL_PRUNED.format(
                    number=trial.number, step=result.pruned_at, metric=metric, value=value
                )
            )
            raise optuna.TrialPruned(f"pruned after validation {result.pruned_at}")
        if result.value is None:
            logged = ", ".join(k for k in result.logged or [] if "/" in k) or "nothing"
            raise LitGpuError(
                messages.SWEEP_METRIC_NOT_LOGGED.format(metric=metric, number=trial.number, logged=logged)
            )
        if not math.isfinite(result.value):
            trial.set_user_attr("error", f"{metric} is {result.value}")
            tell(
                messages.SWEEP_TRIAL_FAILED.format(number=trial.number, reason=f"{metric} is {result.value}")
            )
            raise _TrialFailed(f"{metric} is {result.value}")
        tell(
            messages.SWEEP_TRIAL_FINISHED.format(number=trial.number, metric=metric, value=_fmt(result.value))
        )
        return result.value


# ---- checking the arguments once -----------------------------------------------------------------
class _Parsed(Exception):
    def __init__(self, config: Any) -> None:
        self.config = config


def parse_fit_args(args: list[str]) -> Any:
    """Parse ``fit`` arguments without building anything; returns the ``fit`` config.

    A wrong key or value ends here with the CLI's one-line ``lit-gpu: error:`` and exit status 2.
    """
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    class CheckCLI(LitGpuCLI):
        @override
        def before_instantiate_classes(self) -> None:
            raise _Parsed(self.config)

    try:
        CheckCLI(args=args)
    except _Parsed as parsed:
        return parsed.config["fit"]
    raise AssertionError("LitGpuCLI returned without parsing")  # pragma: no cover


def _flat_keys(config: Any, prefix: str = "") -> list[str]:
    keys = []
    for key, value in config.items() if hasattr(config, "items") else []:
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        if hasattr(value, "items"):
            keys += _flat_keys(value, dotted + ".")
    return keys


def check_space_keys(space: SearchSpace, config: Any) -> None:
    """Every key of the search space must name a setting of the parsed ``fit`` config."""
    import difflib

    known = set(_flat_keys(config.as_dict() if hasattr(config, "as_dict") else config))
    for key in [p.key for p in space.params] + list(space.fixed):
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "see lit-gpu fit --print_config for the keys"
            raise LitGpuError(messages.SWEEP_UNKNOWN_KEY.format(path=space.path, key=key, hint=hint))


# ---- the end-of-sweep report -------------------------------------------------------------------
def _completed(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    trials = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    maximize = study.direction.name.lower() == "maximize"
    return sorted(trials, key=lambda t: (-t.value if maximize else t.value, t.number))


def print_table(study: Any, metric: str, top: int) -> None:
    """The best ``top`` trials (params, metric, run folder) and a count of states, on stdout."""
    from rich.console import Console
    from rich.table import Table

    trials = _completed(study)[:top]
    keys: list[str] = []
    for t in trials:
        keys += [k for k in t.params if k not in keys]
    names = _short_names(keys)
    table = Table(title=f"study {study.study_name}: best {len(trials)} trials by {metric}")
    for column in ("rank", "trial", metric, *(names[k] for k in keys), "run folder"):
        table.add_column(column, no_wrap=column == "run folder")
    for rank, t in enumerate(trials, 1):
        params = [_fmt(t.params[k]) if k in t.params else "" for k in keys]
        table.add_row(str(rank), str(t.number), f"{t.value:.6g}", *params, t.user_attrs.get("run_dir", "?"))
    console = Console(width=None if sys.stdout.isatty() else 200, soft_wrap=False)
    console.print(table)
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    print(f"trials: {', '.join(f'{n} {state}' for state, n in sorted(counts.items()))}", flush=True)


def write_best_config(study: Any, out: Path) -> Path | None:
    """``best.yaml``: the best trial's saved ``config.yaml``, logging to ``runs/lit_gpu`` like any fit."""
    best = _completed(study)[0]
    source = Path(best.user_attrs.get("run_dir", "")) / "config.yaml"
    if not source.is_file():
        tell(messages.SWEEP_BEST_ELSEWHERE.format(number=best.number, path=source))
        return None
    config = yaml.safe_load(source.read_text())
    config.get("trainer", {}).pop("logger", None)  # the CLI's default logger, not the trial's folder
    header = (
        f"# Best trial {best.number} of study {study.study_name}: {study.user_attrs.get('metric')} = "
        f"{best.value:.6g}\n# from {source}\n#   lit-gpu fit --config {out}\n"
    )
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(header + yaml.safe_dump(config, sort_keys=False))
    os.replace(tmp, out)
    return out


def plot_study(study: Any, out: Path, metric: str) -> Path:
    """``sweep.png``: optimization history (values, best so far, pruned) and parameter importances."""
    import optuna
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    from optuna.trial import TrialState

    fig = Figure(figsize=PLOT_FIGSIZE, dpi=PLOT_DPI)
    FigureCanvasAgg(fig)
    history, importance = fig.subplots(1, 2)
    trials = study.get_trials(deepcopy=False)
    done = sorted((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.number)
    maximize = study.direction.name.lower() == "maximize"
    if done:
        xs, ys = [t.number for t in done], [t.value for t in done]
        history.plot(xs, ys, "o", color="tab:blue", label="completed")
        pick = max if maximize else min
        best = [pick(ys[: i + 1]) for i in range(len(ys))]
        history.step(xs, best, where="post", color="tab:red", label="best so far")
    pruned = [t for t in trials if t.state == TrialState.PRUNED and t.intermediate_values]
    if pruned:
        last = [t.intermediate_values[max(t.intermediate_values)] for t in pruned]
        history.plot([t.number for t in pruned], last, "x", color="gray", label="pruned (last report)")
    history.xaxis.set_major_locator(MaxNLocator(integer=True))
    history.set_title("optimization history")
    history.set_xlabel("trial")
    history.set_ylabel(metric)
    history.grid(alpha=0.3)
    if done or pruned:
        history.legend(fontsize="small")
    scores: dict[str, float] = {}
    why = "needs 3 or more completed trials"
    if len(done) >= 3:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "too few trials": the bars say so themselves
                scores = optuna.importance.get_param_importances(study)
        except (ValueError, RuntimeError) as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
    if scores:
        names = _short_names(list(scores))
        labels = [names[k] for k in scores][::-1]
        importance.barh(labels, list(scores.values())[::-1], color="tab:green")
        importance.set_xlabel("importance (Optuna's default evaluator, sums to 1)")
    else:
        importance.text(0.5, 0.5, why, ha="center", va="center", wrap=True, transform=importance.transAxes)
        importance.set_axis_off()
    importance.set_title("parameter importances")
    fig.suptitle(f"study {study.study_name}")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=PLOT_DPI)
    os.replace(tmp, out)
    return out


def report(study: Any, options: SweepOptions) -> int:
    """Table, best.yaml and sweep.png; exit status 1 when no trial has completed yet."""
    if not _completed(study):
        print_table(study, options.metric, options.top)
        tell(messages.SWEEP_NOTHING_COMPLETE.format(study=study.study_name))
        return 1
    print_table(study, options.metric, options.top)
    best = write_best_config(study, options.sweep_dir / "best.yaml")
    png = plot_study(study, options.sweep_dir / "sweep.png", options.metric)
    if best is not None:
        tell(messages.SWEEP_WROTE_BEST.format(path=best))
    tell(messages.SWEEP_WROTE_PLOT.format(path=png))
    return 0


# ---- the command -------------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    import optuna

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep prints its own lines
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


def sweep(options: SweepOptions, fit_args: list[str]) -> int:
    """Run ``options.n_trials`` trials of the study, then report."""
    space = load_space(options.search)
    probe = Objective(options, space, fit_args, child=False)
    gpus = list(range(options.gpus_per_trial)) if options.gpus_per_trial else None
    check_space_keys(space, parse_fit_args(probe.trial_args({}, 0, gpus)))
    trainer_config = parse_fit_args(probe.trial_args(space.first_values(), 0, gpus))["trainer"]
    child = needs_child_process(trainer_config, options.gpus_per_trial)
    objective = Objective(options, space, fit_args, child=child)
    with _quiet_optuna():
        study = open_study(options)
        how = ", each in a child process" if child else ""
        done, more = len(study.trials), options.n_trials
        tell(
            messages.SWEEP_START.format(
                study=options.study, done=done, more=more, folder=options.sweep_dir, how=how
            )
        )
        try:
            study.optimize(objective, n_trials=options.n_trials, catch=(_TrialFailed,), gc_after_trial=True)
        except _StopSweep:
            tell(messages.SWEEP_INTERRUPTED)
            return 130
        return report(study, options)


def main(argv: Sequence[str]) -> int:
    """``lit-gpu sweep --config ... --search SPACE.yaml --n_trials N [...]`` (see :func:`build_parser`)."""
    spec = os.environ.get(TRIAL_ENV)
    if spec:  # a trial's child process (or one of its DDP ranks), started by run_in_child
        return run_trial_child(json.loads(spec))
    options, fit_args = parse_argv(argv)
    return sweep(options, fit_args)
