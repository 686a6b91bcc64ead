"""Running one trial's ``fit``: inside the sweep process, or in a child process for multi-process trials.

Children start as ``python -P -m lit_gpu sweep`` with ``PYTHONSAFEPATH=1`` in their environment (which
Lightning's DDP launcher passes on to the ranks it starts): the working folder is never put on
``sys.path``, so a ``yaml.py`` or ``torch.py`` lying there is not imported.

A continued trial keeps one ``metrics.csv``: the rows before its checkpoint, then the new ones.

Lightning's CSVLogger deletes ``metrics.csv`` when it opens a folder that has one. Before a trial is
continued its file is set aside; after the fit, the rows the stopped attempt wrote from the resumed
step on are dropped (the continuation writes them again) and the rest is put back in front.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.commands.sweep.study import SweepPruning, load_trial
from lit_gpu.explain import explain
from lit_gpu.run.layout import METRICS_NAME
from lit_gpu.textfiles import JSON_LIMITS, BadFileError, parse_json, read_csv, read_json

# ---- trial -----------------------------------------------------------------------------------------------
TRIAL_ENV = "LIT_GPU_SWEEP_TRIAL"
RESULT_NAME = "sweep_trial.json"
ERROR_NAME = "sweep_error.txt"
_SIGNAL_EXITS = (130, 143)  # 128 + SIGINT, 128 + SIGTERM
SPEC_FIX = f"unset {TRIAL_ENV} (lit-gpu sweep sets it for the trial processes it starts)"
RESULT_LIMITS = JSON_LIMITS


@dataclass
class TrialResult:
    """What a trial's fit left: the last value of the metric, whether it was pruned, or an error.

    ``interrupted`` is the exit status of a fit stopped by SIGINT (130) or SIGTERM (143), which left
    its ``last.ckpt``: the trial is continued from there on the next invocation.
    """

    value: float | None = None
    pruned_at: int | None = None
    logged: list[str] | None = None
    error: str | None = None
    interrupted: int | None = None


def _describe_error(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"exited with status {err.code} (the error is printed above)"
    message = explain(err) if isinstance(err, Exception) else None
    if message:
        return message
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _interrupt_code(err: BaseException) -> int | None:
    """130/143 when the fit just run in this process was stopped by SIGINT/SIGTERM, else ``None``.

    ``LitGpuCLI`` ends such a fit (``last.ckpt`` saved) with ``SystemExit(130 | 143)``.
    """
    from lit_gpu.preemption import is_signal_stop

    return int(err.code) if isinstance(err, SystemExit) and is_signal_stop(err) else None


def trial_cli(args: list[str], callback: SweepPruning) -> Any:
    """Run ``lit-gpu fit`` with ``args`` in this process, ``callback`` added to the Trainer."""
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    class TrialCLI(LitGpuCLI):
        @override
        def instantiate_trainer(self, **kwargs):
            trainer = super().instantiate_trainer(**kwargs)
            trainer.callbacks.append(callback)
            return trainer

    return TrialCLI(args=args)


def _write_error(run_dir: Path) -> None:
    with contextlib.suppress(OSError):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / ERROR_NAME).write_text(traceback.format_exc())


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def run_in_process(args: list[str], callback: SweepPruning, run_dir: Path) -> TrialResult:
    """One single-process trial inside the sweep process."""
    try:
        trial_cli(args, callback)
    except (Exception, SystemExit) as err:
        code = _interrupt_code(err)
        if code is not None:
            return TrialResult(error="interrupted", interrupted=code)
        _write_error(run_dir)
        return TrialResult(error=_describe_error(err))
    except KeyboardInterrupt:
        return TrialResult(error="interrupted", interrupted=130)
    return TrialResult(callback.last_value, callback.pruned_at, callback.logged)


def child_command() -> tuple[list[str], dict[str, str]]:
    """``python -P -m lit_gpu sweep`` and its environment: the working folder stays off ``sys.path``."""
    env = {**os.environ, "PYTHONSAFEPATH": "1"}  # inherited by Lightning's DDP ranks too
    if "PYTHONPATH" in env:  # an empty entry (`:$PYTHONPATH` with none set) is the working folder: dropped
        kept = [
            os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p
        ]  # `.`: the user's choice
        env["PYTHONPATH"] = os.pathsep.join(kept)
    safe = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe, "-m", "lit_gpu", "sweep"], env


def run_in_child(
    spec: dict[str, Any], run_dir: Path, on_start: Callable[[int], None] | None = None
) -> TrialResult:
    """One trial in a child ``python -P -m lit_gpu sweep`` process (needed for multi-process trials).

    ``on_start`` gets the child's pid (the owner record notes it).
    """
    result_path = run_dir / RESULT_NAME
    with contextlib.suppress(FileNotFoundError):
        result_path.unlink()
    command, env = child_command()
    env[TRIAL_ENV] = json.dumps({**spec, "result": str(result_path)})
    proc = subprocess.Popen(command, env=env)
    if on_start is not None:
        on_start(proc.pid)
    try:
        with _sigterm_forwarded_to(proc):
            returncode = proc.wait()
    except KeyboardInterrupt:  # the child got the same Ctrl+C: let it save its last.ckpt
        proc.wait()
        return TrialResult(error="interrupted", interrupted=130)
    if result_path.is_file():
        result = read_result(result_path)
        if returncode == 0 or result.error:
            return result
    if returncode in _SIGNAL_EXITS or -returncode in (signal.SIGINT, signal.SIGTERM):
        code = returncode if returncode > 0 else 128 - returncode
        return TrialResult(error="interrupted", interrupted=code)
    return TrialResult(error=f"the trial process exited with status {returncode} (its error is above)")


def trial_spec(text: str) -> dict[str, Any]:
    """The trial spec a sweep worker put in ``$LIT_GPU_SWEEP_TRIAL`` for its child process."""
    spec = parse_json(text, f"${TRIAL_ENV}", fix=SPEC_FIX)
    keys = {"connect": dict, "metric": str, "args": list, "result": str}
    if not isinstance(spec, dict) or not all(isinstance(spec.get(k), t) for k, t in keys.items()):
        raise BadFileError(f"${TRIAL_ENV}", "not a trial spec of lit-gpu sweep", SPEC_FIX)
    return spec


def read_result(path: Path) -> TrialResult:
    """The result file a trial's child process wrote; a damaged one counts as an error of that trial."""
    fields = {"value": (int, float), "pruned_at": int, "logged": list, "error": str, "interrupted": int}
    try:
        data = read_json(path, RESULT_LIMITS)
    except BadFileError as err:
        return TrialResult(error=err.problem)
    if not isinstance(data, dict) or not all(
        k in fields and (v is None or isinstance(v, fields[k])) for k, v in data.items()
    ):
        return TrialResult(error=f"{messages.shown(path)} is not a trial result")
    if data.get("logged") is not None:
        data["logged"] = [str(x) for x in data["logged"]]
    return TrialResult(**data)


@contextlib.contextmanager
def _sigterm_forwarded_to(proc: subprocess.Popen) -> Iterator[None]:
    """While the worker waits for its trial process, SIGTERM goes on to that process (which saves its
    ``last.ckpt`` and exits 143) instead of ending the worker at once; a second one does no harm."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _die_with_parent() -> None:
    """SIGTERM this process when the sweep worker that started it dies (Linux): no orphaned trial."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_trial_child(spec: dict[str, Any]) -> int:
    """Body of the child process started by :func:`run_in_child` (and of its DDP ranks)."""

    if "LOCAL_RANK" not in os.environ:
        _die_with_parent()
    connect = spec["connect"]
    callback = SweepPruning(
        None, spec["metric"], spec.get("reported", ()), connect=lambda: load_trial(connect)
    )
    rank = int(os.environ.get("LOCAL_RANK", "0")) + int(os.environ.get("NODE_RANK", "0"))
    result_path = Path(spec["result"])
    try:
        trial_cli(list(spec["args"]), callback)
    except (Exception, SystemExit) as err:
        code = _interrupt_code(err)
        if code is not None:
            return code
        if rank == 0:
            _write_error(result_path.parent)
            _write_json(result_path, asdict(TrialResult(error=_describe_error(err))))
        return 1
    if rank == 0:
        result = TrialResult(callback.last_value, callback.pruned_at, callback.logged)
        _write_json(result_path, asdict(result))
    return 0


# ---- metrics_csv -----------------------------------------------------------------------------------------
METRICS = METRICS_NAME
ASIDE = ".metrics.before_continue.csv"
FIX = "remove it (the trial continues from its checkpoint; only the curves of its earlier steps are lost)"


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    return read_csv(path, fix=FIX)


def _step(row: dict[str, str]) -> float:
    with contextlib.suppress(TypeError, ValueError):
        return float(row.get("step") or "nan")
    return float("nan")


def put_back(run_dir: Path) -> None:
    """Merge the set-aside rows before the new ``metrics.csv`` (rows from its first step on dropped)."""
    aside, current = run_dir / ASIDE, run_dir / METRICS
    if not aside.is_file():
        return
    keys, old = _rows(aside)
    new_keys, new = _rows(current) if current.is_file() else ([], [])
    steps = [s for s in map(_step, new) if s == s]
    first = min(steps) if steps else float("inf")
    kept = [r for r in old if not _step(r) >= first]
    fields = keys + [k for k in new_keys if k not in keys]
    with atomic_file(current, "w", newline="") as f:  # a fresh temp name: never through a planted link
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept + new)
    aside.unlink()


def set_aside(run_dir: Path) -> None:
    """Move ``metrics.csv`` out of the CSVLogger's way before the trial is continued."""
    put_back(run_dir)  # an earlier continuation that was stopped before it could merge
    current = run_dir / METRICS
    if current.is_file():
        os.replace(current, run_dir / ASIDE)
