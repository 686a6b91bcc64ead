"""The Optuna side: is optuna installed, the storage, the pruner, the sampler and the study."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lit_gpu import messages
from lit_gpu.checkpoints.contracts import inside
from lit_gpu.commands.sweep.options import JOURNAL_NAME, SweepOptions
from lit_gpu.errors import LitGpuError
from lit_gpu.files.text import JSON_LINES_LIMITS, BadFileError, json_lines

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
    :data:`lit_gpu.files.text.JSON_LINES_LIMITS`), before optuna replays it."""
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
