"""Sweep storages are data: the checked reader of trial attributes and of a trial's owner record.

A study's storage (journal file, database) may have been written by someone else. Nothing read from
it runs code, names a file to read, or reaches past the search space:

* a trial's ``run_dir`` must resolve (``..``, absolute paths and symlinks followed) inside the sweep
  folder, else the sweep stops with one line;
* its parameters must be keys of the user's search space with values the space allows (a queued
  trial's value outside the space stops the sweep with one line);
* nothing else of the trial's attributes is used.

The owner record ``<sweep_dir>/.owners/version_N.json`` (which worker runs a trial: pid, host,
heartbeat) is read here too; a malformed one counts as absent.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from lit_gpu import messages
from lit_gpu.checkpoints.contracts import inside
from lit_gpu.errors import LitGpuError
from lit_gpu.textfiles import JSON_LIMITS, YAML_LIMITS, BadFileError, read_json, read_yaml

SPACE_LIMITS = replace(YAML_LIMITS, max_bytes=1 << 20, max_depth=16)  # a search space is a few dozen lines
OWNER_LIMITS = replace(JSON_LIMITS, max_bytes=64 << 10, max_depth=4)  # one flat record
_MAX_PID = 1 << 31  # a pid is a positive C int (os.kill overflows past it)


def read_space_file(path: str | os.PathLike) -> Any:
    """A search-space YAML file as plain data (the bounded reader: core-schema tags only, no objects).

    Raises:
        FileNotFoundError: No such file.
        OSError, ValueError: Unreadable, too big (over 1 MiB) or not YAML (``yaml.YAMLError`` is a
            ``ValueError`` here, with its first line as the message).
    """
    # read as jsonargparse's loader reads a config (``1e-4`` is a float, a date stays a string), the
    # reader the same file's fixed values and every --config go through: PyYAML's own YAML 1.1 resolver
    # made ``low: 1e-4`` the string '1e-4' and the space was refused
    from lit_gpu.upstream import jsonargparse_yaml_loader

    try:
        fix = "fix the search space file"
        return read_yaml(path, SPACE_LIMITS, fix=fix, loader=jsonargparse_yaml_loader())
    except BadFileError as err:
        raise ValueError(err.problem) from None


OWNERS = ".owners"
_STATES = ("running", "stopped")


class _Param(Protocol):
    key: str

    def contains(self, value: Any) -> bool: ...


class _Space(Protocol):
    path: str
    params: list[Any]


@dataclass(frozen=True)
class TrialRecord:
    """The checked facts of one stored trial."""

    number: int
    state: str  # optuna's TrialState name, lower case: running, complete, pruned, fail, waiting
    value: float | None
    params: dict[str, Any]
    run_dir: Path
    reported: tuple[int, ...]  # steps of its intermediate values
    resumed: int  # times it was continued after a stop


def trial_folder(sweep_dir: Path, number: int) -> Path:
    """The folder trial ``number`` runs and logs in: ``sweep_dir/version_<number>``."""
    return sweep_dir / f"version_{number}"


def check_run_dir(value: Any, sweep_dir: Path, number: int, storage: str) -> Path:
    """``sweep_dir/version_<number>``, the only folder trial ``number`` runs in, when the storage's record
    ``value`` names it (any spelling that resolves there) and that folder leads nowhere else; else one line.

    The record is compared, never used: what lit_gpu writes to is the folder it built itself, so a ``~``,
    a ``/proc/self/fd/N`` path or another trial's folder cannot make the check and the use differ.
    """
    expected = trial_folder(sweep_dir, number)
    named = (
        isinstance(value, str)
        and "\0" not in value
        and "://" not in value
        and os.path.realpath(value) == os.path.realpath(expected)
    )
    if not named or not inside(expected, sweep_dir):  # inside: a version_<number> link elsewhere is not
        raise LitGpuError(
            messages.SWEEP_RUN_DIR_OUTSIDE.format(
                storage=storage, number=number, path=str(value)[:200], folder=sweep_dir, own=expected.name
            )
        )
    return expected


def check_params(params: Mapping[str, Any], space: _Space, number: int, storage: str) -> dict[str, Any]:
    """``params`` when every key is in ``space`` and every value one it allows; else one line."""
    by_key = {p.key: p for p in space.params}
    for key, value in params.items():
        param = by_key.get(key)
        if param is None or not param.contains(value):
            what = "is not a key of" if param is None else "is outside"
            raise LitGpuError(
                messages.SWEEP_VALUE_OUTSIDE.format(
                    storage=storage,
                    number=number,
                    key=key,
                    value=repr(value)[:80],
                    what=what,
                    space=space.path,
                )
            )
    return dict(params)


def read_trial(trial: Any, sweep_dir: Path, space: _Space | None, storage: str) -> TrialRecord:
    """The checked record of an Optuna ``FrozenTrial``.

    ``run_dir`` defaults to ``<sweep_dir>/version_<number>`` when the attribute is missing (a trial
    stopped before it was set). ``space=None`` skips the parameter check (reports of other spaces).
    """
    number = int(trial.number)
    attrs = trial.user_attrs
    run_dir = attrs.get("run_dir", str(trial_folder(sweep_dir, number)))
    run_dir = check_run_dir(run_dir, sweep_dir, number, storage)
    params = dict(trial.params)
    if space is not None:
        check_params(params, space, number, storage)
    value = trial.value if isinstance(trial.value, int | float) else None
    resumed = attrs.get("resumed", 0)
    return TrialRecord(
        number=number,
        state=trial.state.name.lower(),
        value=float(value) if value is not None and math.isfinite(value) else value,
        params=params,
        run_dir=run_dir,
        reported=tuple(sorted(int(s) for s in trial.intermediate_values)),
        resumed=resumed if isinstance(resumed, int) and not isinstance(resumed, bool) else 0,
    )


@dataclass
class Owner:
    """Who runs a trial: the worker's pid and host, its processes' start marks, the last heartbeat."""

    pid: int
    host: str
    beat: float  # time.time() of the last heartbeat
    state: str = "running"  # "stopped": the worker saved last.ckpt after SIGINT/SIGTERM and let go
    started: str | None = None  # /proc start time of pid (tells a reused pid apart)
    child_pid: int | None = None
    child_started: str | None = None


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < _MAX_PID


def _short_str(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 256


def owner_path(sweep_dir: Path, run_dir: Path) -> Path:
    """Where the owner record of the trial in ``run_dir`` lives (outside it: the run folder stays clean)."""
    return sweep_dir / OWNERS / f"{run_dir.name}.json"


def read_owner(path: Path) -> Owner | None:
    """The owner record at ``path``; ``None`` when absent or malformed."""
    try:
        data = read_json(path, OWNER_LIMITS)
    except (OSError, BadFileError):
        return None
    if not isinstance(data, dict):
        return None
    beat = data.get("beat")
    ok = (
        _int(data.get("pid"))
        and _short_str(data.get("host"))
        and isinstance(beat, int | float)
        and not isinstance(beat, bool)
        and math.isfinite(beat)
        and data.get("state", "running") in _STATES
        and all(data.get(k) is None or _short_str(data.get(k)) for k in ("started", "child_started"))
        and (data.get("child_pid") is None or _int(data.get("child_pid")))
    )
    if not ok:
        return None
    fields = ("pid", "host", "beat", "state", "started", "child_pid", "child_started")
    return Owner(**{k: data[k] for k in fields if k in data})


def trial_params_flags(params: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``params`` in the order of ``keys`` (the search space's order), for the trial's flags."""
    return {k: params[k] for k in keys if k in params}
