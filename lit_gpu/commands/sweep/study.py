"""The Optuna side: is optuna installed, the storage, the pruner, the sampler and the study.

``SweepPruning``: report the metric to the Optuna trial after each validation; stop pruned trials.

The end-of-sweep report: a table of the best trials and ``sweep.png`` (history, importances).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints.contracts import inside
from lit_gpu.commands.plot import plain_label
from lit_gpu.commands.sweep.options import JOURNAL_NAME, SweepOptions
from lit_gpu.commands.sweep.space import fmt, short_names
from lit_gpu.commands.sweep.storage import TrialRecord
from lit_gpu.errors import LitGpuError
from lit_gpu.textfiles import JSON_LINES_LIMITS, BadFileError, json_lines

# ---- study -----------------------------------------------------------------------------------------------
RDB_SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "oracle", "mssql")
JOURNAL_FIX = "it was not written by lit-gpu sweep: use a new --study_name or --storage, or remove it"
JOURNAL_LINKS_OUT = (
    "sweep journal {path} is a link out of the sweep folder {folder}; remove the link, "
    "or name the journal you mean with --storage"
)
BAD_STORAGE = (
    "--storage {url}: cannot open that database ({reason}); check the URL "
    "(e.g. sqlite:///sweep.db, postgresql://user:password@host/db) and that its driver is installed"
)
SWEEP_DIR_OUTSIDE = (
    "sweep folder {folder} leads out of --root {root} (a link); remove the link or pass another --root"
)
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def _database_error(err: BaseException) -> bool:
    """Whether ``err`` is the database layer's answer to a URL (bad URL, no driver, no server)."""
    kinds: tuple[type[BaseException], ...] = (ImportError, ValueError, OSError)
    with contextlib.suppress(ImportError):  # optuna needs SQLAlchemy for RDB storages
        from sqlalchemy.exc import SQLAlchemyError

        kinds += (SQLAlchemyError,)
    return isinstance(err, kinds)


_SEED_STRIDE = 1_000_003  # a prime: seed s, trial n -> (s * stride + n) mod 2**32


def require_optuna() -> None:
    """Import optuna, or say in one line how to install it (``lit-gpu[sweep]``)."""
    try:
        import optuna  # noqa: F401
    except ImportError as err:
        raise LitGpuError(messages.SWEEP_NEEDS_OPTUNA.format(error=str(err).splitlines()[0])) from err


def make_storage(spec: str | None, sweep_dir: Path) -> Any:
    """An Optuna storage: an RDB for ``scheme://`` URLs, else a journal file (default in ``sweep_dir``)."""
    import optuna

    if spec and "://" in spec:
        scheme = spec.split("://", 1)[0].split("+", 1)[0].lower()
        if scheme not in RDB_SCHEMES:
            raise LitGpuError(
                messages.SWEEP_UNKNOWN_STORAGE.format(spec=shown_url(spec), scheme=messages.shown(scheme))
            )
        return _rdb_storage(spec)
    path = Path(spec) if spec else sweep_dir / JOURNAL_NAME
    if not spec and (path.exists() or path.is_symlink()) and not inside(path, sweep_dir):
        raise LitGpuError(
            JOURNAL_LINKS_OUT.format(path=messages.shown(path), folder=messages.shown(sweep_dir))
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    check_journal(path)
    try:
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    except (
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        AttributeError,
        AssertionError,
        RecursionError,
    ) as err:
        # optuna replays the journal here: an entry it cannot apply was not written by optuna
        problem = f"an entry optuna cannot replay ({type(err).__name__}: {messages.first_line(err)})"
        raise BadFileError(path, messages.shown(problem, limit=160), JOURNAL_FIX) from err


def check_journal(path: Path) -> None:
    """Every complete line of a journal file is a JSON object with an integer ``op_code`` (budgeted:
    :data:`lit_gpu.textfiles.JSON_LINES_LIMITS`), before optuna replays it."""
    if not path.exists():
        return
    for number, entry in json_lines(path, JSON_LINES_LIMITS, fix=JOURNAL_FIX):
        if not (isinstance(entry, dict) and type(entry.get("op_code")) is int):
            raise BadFileError(path, "an entry is not an optuna journal record", JOURNAL_FIX, number)


def shown_url(url: str) -> str:
    """A storage URL for a message: one safe line, its password hidden."""
    return messages.shown(_PASSWORD.sub(r"\1***@", url), limit=120)


def _rdb_storage(url: str, tries: int = 5) -> Any:
    """``RDBStorage(url)``; workers that start together on a new database race to create its tables."""
    import optuna

    for attempt in range(tries):
        try:
            return optuna.storages.RDBStorage(url)
        except Exception as err:  # SQLAlchemy's IntegrityError/ProgrammingError: "... already exists"
            if attempt == tries - 1 or "already exists" not in str(err):
                if _database_error(err):
                    reason = shown_url(messages.first_line(err))  # its text may quote the URL
                    raise LitGpuError(BAD_STORAGE.format(url=shown_url(url), reason=reason)) from err
                raise
            time.sleep(0.5 + attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def make_pruner(name: str, startup_trials: int) -> Any:
    """Optuna's MedianPruner (``median``) or no pruning (``none``)."""
    import optuna

    if name == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=0)


def trial_seed(seed: int, number: int) -> int:
    """The sampler seed of trial ``number`` in a sweep started with ``--seed seed``."""
    return (seed * _SEED_STRIDE + number) % 2**32


def make_sampler(seed: int | None) -> Any:
    """TPE whose random draws for trial ``n`` are seeded with ``trial_seed(seed, n)``.

    Optuna's ``TPESampler(seed=s)`` draws the same sequence in every process: a re-run of the same
    command, or a second worker with the same ``--seed``, would sample the first trials' parameters
    again. Seeding per trial number (unique in a study) keeps a fixed-seed sweep reproducible from
    scratch while every new trial draws new points.
    """
    import optuna

    class TrialSeededSampler(optuna.samplers.BaseSampler):
        def __init__(self) -> None:
            self._shared = optuna.samplers.TPESampler(seed=None) if seed is None else None
            self._by_number: dict[int, Any] = {}

        def _for(self, trial: Any) -> Any:
            if self._shared is not None:
                return self._shared
            if trial.number not in self._by_number:
                self._by_number = {
                    trial.number: optuna.samplers.TPESampler(seed=trial_seed(seed, trial.number))
                }
            return self._by_number[trial.number]

        def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
            return self._for(trial).infer_relative_search_space(study, trial)

        def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            return self._for(trial).sample_relative(study, trial, search_space)

        def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
            return self._for(trial).sample_independent(study, trial, name, distribution)

        def before_trial(self, study: Any, trial: Any) -> None:
            self._for(trial).before_trial(study, trial)

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            self._for(trial).after_trial(study, trial, state, values)

    return TrialSeededSampler()


def open_study(options: SweepOptions) -> Any:
    """Create the study, or load it when it exists (same name and storage: the sweep continues)."""
    import optuna

    if options.sweep_dir.exists() and not inside(options.sweep_dir, options.root):
        raise LitGpuError(
            SWEEP_DIR_OUTSIDE.format(
                folder=messages.shown(options.sweep_dir), root=messages.shown(options.root)
            )
        )
    storage = make_storage(options.storage, options.sweep_dir)
    study = optuna.create_study(
        study_name=options.study,
        storage=storage,
        sampler=make_sampler(options.seed),
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


def load_trial(connect: dict[str, Any]) -> Any:
    """The running ``optuna.Trial`` a child process reports to (``connect`` from its parent)."""
    import optuna

    study = optuna.load_study(
        study_name=connect["study"],
        storage=make_storage(connect["storage"], Path(connect["sweep_dir"])),
        pruner=make_pruner(connect["pruner"], connect["startup"]),
    )
    return optuna.trial.Trial(study, connect["trial_id"])


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Optuna's own log lines off: the sweep prints its own."""
    import optuna

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


# ---- pruning ---------------------------------------------------------------------------------------------
class SweepPruning(Callback):
    """Reports ``metric`` to an Optuna trial after every validation; stops the fit when it is pruned.

    Step ``k`` is the ``k``-th validation of the run (sanity checks excluded). The count is saved in
    the checkpoint, so a trial continued from its ``last.ckpt`` goes on counting where it stopped;
    steps the trial already reported before it was stopped (``reported``) are not reported again.
    Only global rank 0 talks to the storage; under DDP its decision is broadcast so that every rank
    stops together. Stopping sets ``trainer.should_stop`` (the fit ends normally and leaves its
    ``last.ckpt``); the sweep then records the trial as pruned.

    Args:
        trial: The ``optuna.Trial`` (``None`` on ranks other than 0, or when ``connect`` is given).
        metric: Key in ``trainer.callback_metrics``, e.g. ``val/loss``.
        reported: Steps already in the trial's intermediate values.
        connect: A function that loads the trial from storage on rank 0 (trials in a child process).
    """

    def __init__(
        self,
        trial: Any,
        metric: str,
        reported: Iterable[int] = (),
        connect: Callable[[], Any] | None = None,
    ) -> None:
        self.trial = trial
        self.metric = metric
        self.reported = set(reported)
        self.connect = connect
        self.reports = 0
        self.last_value: float | None = None
        self.pruned_at: int | None = None
        self.logged: list[str] = []

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"reports": self.reports}

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The number of reports made: an int >= 0 (anything else restarts the count)."""
        from lit_gpu.checkpoints import contracts as c

        return [c.Contract(("callbacks", self.state_key), c.fields({"reports": c.anything()}))]

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        reports = state_dict.get("reports", 0)
        self.reports = reports if isinstance(reports, int) and reports >= 0 else 0

    def _rank_zero_trial(self) -> Any:
        if self.trial is None and self.connect is not None:
            self.trial = self.connect()
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
                if step not in self.reported:  # a continued trial: reported before its stop
                    trial.report(self.last_value, step)
                    self.reported.add(step)
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


# ---- report ----------------------------------------------------------------------------------------------
PLOT_FIGSIZE = (12.0, 4.5)  # inches, as `lit-gpu plot`
PLOT_DPI = 100


def completed(records: list[TrialRecord], maximize: bool) -> list[TrialRecord]:
    """The completed trials, best first."""
    done = [r for r in records if r.state == "complete" and r.value is not None]
    return sorted(done, key=lambda r: (-r.value if maximize else r.value, r.number))


def print_table(study: Any, records: list[TrialRecord], metric: str, top: int) -> None:
    """The best ``top`` trials (params, metric, run folder) and a count of states, on stdout."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def cell(value: object) -> Text:  # text from the storage: one safe line, never Rich markup
        return Text(messages.shown(value, limit=80))

    trials = completed(records, study.direction.name.lower() == "maximize")[:top]
    keys: list[str] = []
    for t in trials:
        keys += [k for k in t.params if k not in keys]
    names = short_names(keys)
    table = Table(title=cell(f"study {study.study_name}: best {len(trials)} trials by {metric}"))
    for column in ("rank", "trial", metric, *(names[k] for k in keys), "run folder"):
        table.add_column(cell(column), no_wrap=column == "run folder")
    for rank, t in enumerate(trials, 1):
        params = [cell(fmt(t.params[k])) if k in t.params else "" for k in keys]
        table.add_row(f"{rank:d}", f"{t.number:d}", f"{t.value:.6g}", *params, cell(t.run_dir))
    console = Console(width=None if sys.stdout.isatty() else 200, soft_wrap=False)
    console.print(table)
    counts: dict[str, int] = {}
    for r in records:
        counts[r.state] = counts.get(r.state, 0) + 1
    print(  # optuna's state names, as the storage holds them
        messages.one_line(f"trials: {', '.join(f'{n} {state}' for state, n in sorted(counts.items()))}"),
        flush=True,
    )


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
    history.set_ylabel(plain_label(metric))
    history.grid(alpha=0.3)
    if done or pruned:
        history.legend(fontsize="small")
    scores: dict[str, float] = {}
    why = "needs 3 or more completed trials"
    if len(done) >= 3:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "too few trials": the bars say so themselves
                # PED-ANOVA: optuna 5's default, pure Python; 4.x defaulted to fANOVA, which needs sklearn
                evaluator = optuna.importance.PedAnovaImportanceEvaluator()
                scores = optuna.importance.get_param_importances(study, evaluator=evaluator)
        except (ValueError, RuntimeError) as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
    if scores:
        names = short_names(list(scores))
        labels = [plain_label(names[k]) for k in scores][::-1]
        importance.barh(labels, list(scores.values())[::-1], color="tab:green")
        importance.set_xlabel("importance (Optuna's PED-ANOVA, sums to 1)")
    else:
        importance.text(0.5, 0.5, why, ha="center", va="center", wrap=True, transform=importance.transAxes)
        importance.set_axis_off()
    importance.set_title("parameter importances")
    fig.suptitle(plain_label(f"study {study.study_name}"))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=PLOT_DPI)
    os.replace(tmp, out)
    return out
