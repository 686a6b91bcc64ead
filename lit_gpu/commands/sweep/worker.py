"""One sweep worker: pick a trial (a stopped one to continue first, else a new one), run it, record it.

Which worker runs which trial: owner records, heartbeats, and stale trials to continue.

Every running trial has an owner record ``<sweep_dir>/.owners/version_N.json``
(:mod:`lit_gpu.commands.sweep.storage`): the worker's pid and host, the start time of that
process, and a heartbeat refreshed every :data:`HEARTBEAT_S` seconds by a thread. A RUNNING
trial of the study is *stale*, and the next worker that looks continues it from its ``last.ckpt``,
when

* its worker stopped on SIGINT/SIGTERM (record ``state: stopped``, written after ``last.ckpt``);
* its worker ran on this host and neither it nor its trial process is alive (SIGKILL, OOM killer);
* its worker ran on another host and its heartbeat is older than :data:`STALE_AFTER_S` (node lost);
* it has no record and started more than :data:`STALE_AFTER_S` ago.

This works the same on a journal file and on any RDB: it needs no storage feature, only the sweep
folder (a worker can continue a trial only where it sees that trial's folder anyway). Claims are
made under a file lock in the sweep folder, so two workers never continue the same trial.

Where a trial runs: in the sweep process or a child, and on which GPUs (claims per machine).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import gc
import json
import math
import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lit_gpu import devices as lit_devices
from lit_gpu import messages
from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.commands.sweep.options import JOURNAL_NAME, SweepOptions
from lit_gpu.commands.sweep.space import SearchSpace, fmt, format_value, logger_flag, short_names
from lit_gpu.commands.sweep.storage import (
    Owner,
    TrialRecord,
    check_params,
    owner_path,
    read_owner,
    read_trial,
    trial_folder,
)
from lit_gpu.commands.sweep.study import SweepPruning
from lit_gpu.commands.sweep.trial import TrialResult, put_back, run_in_child, run_in_process, set_aside
from lit_gpu.devices import parse_free_request
from lit_gpu.errors import LitGpuError
from lit_gpu.run.layout import CHECKPOINTS, refuse_links_out_of
from lit_gpu.textfiles import JSON_LIMITS, BadFileError, read_json
from lit_gpu.upstream import trial_id

# ---- worker ----------------------------------------------------------------------------------------------
# what lit-gpu sweep says as it runs (printed with messages.tell)
SWEEP_START = "study {study} ({done} trials so far), {more} more; runs in {folder}{how}"
SWEEP_TRIAL_START = "trial {number}: {params}{gpus} -> {folder}"
SWEEP_TRIAL_FINISHED = "trial {number} finished: {metric}={value}"
SWEEP_TRIAL_PRUNED = "trial {number} pruned after validation {step} ({metric}={value})"
SWEEP_TRIAL_FAILED = "trial {number} failed: {reason}"
SWEEP_INTERRUPTED = (
    "trial {number} stopped with its last.ckpt in {folder}; the same command continues it from there"
)
SWEEP_TRIAL_CONTINUE = "trial {number}: continuing ({why}): {params}{gpus} from {start}"
SWEEP_WAITING = (
    "{finished} of {target} trials finished; the others run in other workers: waiting for them "
    "(a stale one is continued here)"
)
SWEEP_NOTHING_COMPLETE = "no trial of study {study} has completed yet; no best.yaml or plot written"
SWEEP_WROTE_BEST = "wrote {path} (run it: lit-gpu fit --config {path})"
SWEEP_WROTE_PLOT = "wrote {path}"

WAIT_S = 10.0  # --until_complete: how often to look again while other workers run the last trials


@dataclass
class Pick:
    """The trial this worker runs next; ``record`` and ``why`` are set when it continues a stopped one."""

    trial: Any
    run_dir: Path
    record: TrialRecord | None = None
    why: str | None = None


class Worker:
    """Runs trials of ``study`` until ``--n_trials`` are done or ``--until_complete N`` is reached."""

    def __init__(
        self, options: SweepOptions, space: SearchSpace, fit_args: list[str], child: bool, study: Any
    ) -> None:
        self.options, self.space, self.fit_args, self.child, self.study = (
            options,
            space,
            fit_args,
            child,
            study,
        )
        self.storage_name = options.storage or str(options.sweep_dir / JOURNAL_NAME)
        self.names = short_names([p.key for p in space.params])
        self.claims = GpuClaims(options.sweep_dir) if options.gpus_per_trial else None
        self.heartbeat = Heartbeat()

    def trial_args(self, values: dict[str, Any], version: int, gpus: list[int] | None) -> list[str]:
        """The ``fit`` arguments of one trial logging to ``version_<version>``."""
        args = [
            "fit",
            *self.fit_args,
            *self.space.flags(values),
            logger_flag(self.options.sweep_dir, version),
        ]
        args.append("--checkpoint.dirpath=null")  # checkpoints in the trial's own folder, never shared
        if gpus is not None:
            args += ["--trainer.accelerator=gpu", f"--trainer.devices={format_value(gpus)}"]
        return args

    # ---- picking --------------------------------------------------------------------------------
    def _records(self) -> list[tuple[Any, TrialRecord]]:
        trials = self.study.get_trials(deepcopy=False)
        # values are checked for the trials this worker runs (a changed space may leave old ones behind)
        return [(t, read_trial(t, self.options.sweep_dir, None, self.storage_name)) for t in trials]

    def finished(self) -> int:
        """Trials of the study that are complete, pruned or failed."""
        return sum(t.state.is_finished() for t in self.study.get_trials(deepcopy=False))

    def next_trial(self) -> Pick | None:
        """A stale trial to continue, else a new one; ``None`` while ``--until_complete`` waits."""
        import optuna

        with claims_lock(self.options.sweep_dir):
            records = self._records()
            for frozen, record in records:
                if record.state != "running":
                    continue
                owner = owner_path(self.options.sweep_dir, record.run_dir)
                why = stale_reason(read_owner(owner), frozen.datetime_start)
                if why:
                    self.heartbeat.start(owner)
                    trial = optuna.trial.Trial(self.study, trial_id(frozen))
                    return Pick(trial, record.run_dir, record, why)
            target = self.options.until_complete
            if target is not None:
                busy = sum(r.state in ("running", "complete", "pruned", "fail") for _, r in records)
                if busy >= target:
                    return None
            trial = self.study.ask()
            run_dir = trial_folder(self.options.sweep_dir, trial.number)
            self.heartbeat.start(owner_path(self.options.sweep_dir, run_dir))
            return Pick(trial, run_dir)

    def run(self) -> int | None:
        """Run trials; the exit status of a stop by signal (130/143), else ``None``."""
        ran, waiting = 0, False
        target = self.options.until_complete
        while True:
            if target is None and ran >= self.options.n_trials:
                return None
            if target is not None and self.finished() >= target:
                return None
            pick = self.next_trial()
            if pick is None:
                if not waiting:
                    messages.tell(SWEEP_WAITING.format(finished=self.finished(), target=target))
                waiting = True
                time.sleep(WAIT_S)
                continue
            waiting = False
            code = self.run_trial(pick)
            ran += 1
            gc.collect()
            if code is not None:
                return code

    # ---- one trial ------------------------------------------------------------------------------
    def run_trial(self, pick: Pick) -> int | None:
        """Run ``pick`` and record its outcome; 130/143 when a signal stopped it (it is continued later)."""
        trial, run_dir = pick.trial, pick.run_dir
        stopped = False
        try:
            values = self.space.sample(trial)
            try:
                check_params(values, self.space, trial.number, self.storage_name)
            except LitGpuError as err:
                trial.set_user_attr("error", str(err))
                self.study.tell(trial, state=_state("FAIL"))
                raise
            result = self._fit(pick, values)
            stopped = result.interrupted is not None
            if stopped:
                messages.tell(SWEEP_INTERRUPTED.format(number=trial.number, folder=run_dir))
                return result.interrupted
            self._record(trial, result)
            return None
        finally:
            self.heartbeat.stop(stopped=stopped)

    def _fit(self, pick: Pick, values: dict[str, Any]) -> TrialResult:
        trial, run_dir = pick.trial, pick.run_dir
        # Lightning's loggers and checkpoints write into the trial's folder in place
        refuse_links_out_of(run_dir, messages.SWEEP_TRIAL_LINKS_OUT, number=trial.number)
        gpus = self.claims.claim(self.options.gpus_per_trial) if self.claims else None
        args = self.trial_args(values, trial.number, gpus)  # run_dir is trial_folder(sweep_dir, number)
        last = run_dir / CHECKPOINTS / "last.ckpt"
        shown = ", ".join(f"{self.names[k]}={fmt(v)}" for k, v in values.items())
        where = f" on GPU {','.join(map(str, gpus))}" if gpus else ""
        if pick.record is None:
            trial.set_user_attr("run_dir", str(run_dir))
            trial.set_user_attr("params", dict(values))
            messages.tell(
                SWEEP_TRIAL_START.format(number=trial.number, params=shown, gpus=where, folder=run_dir)
            )
        else:
            trial.set_user_attr("resumed", pick.record.resumed + 1)
            start = str(last) if last.is_file() else "the start (no last.ckpt)"
            if last.is_file():
                args.append(f"--ckpt_path={last}")
            messages.tell(
                SWEEP_TRIAL_CONTINUE.format(
                    number=trial.number, why=pick.why, params=shown, gpus=where, start=start
                )
            )
        trial.set_user_attr("args", args)
        reported = pick.record.reported if pick.record else ()
        if pick.record is not None:
            set_aside(run_dir)
        try:
            if self.child:
                spec = {
                    "args": args,
                    "metric": self.options.metric,
                    "reported": list(reported),
                    "connect": self._connect(trial),
                }
                return run_in_child(spec, run_dir, on_start=self.heartbeat.set_child)
            callback = SweepPruning(trial, self.options.metric, reported)
            with warnings.catch_warnings():
                if pick.record is not None:  # its own folder, continued on purpose
                    warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
                return run_in_process(args, callback, run_dir)
        finally:
            if self.claims:
                self.claims.release()
            if pick.record is not None:
                put_back(run_dir)

    def _connect(self, trial: Any) -> dict[str, Any]:
        options = self.options
        return {
            "storage": options.storage,
            "sweep_dir": str(options.sweep_dir),
            "study": options.study,
            "trial_id": trial_id(trial),
            "pruner": options.pruner,
            "startup": options.pruner_startup_trials,
        }

    def _record(self, trial: Any, result: TrialResult) -> None:
        metric, number = self.options.metric, trial.number
        if result.error:
            self._fail(trial, result.error)
        elif result.pruned_at is not None:
            value = fmt(result.value)
            step = result.pruned_at
            messages.tell(SWEEP_TRIAL_PRUNED.format(number=number, step=step, metric=metric, value=value))
            self.study.tell(trial, state=_state("PRUNED"))
        elif result.value is None:
            logged = ", ".join(k for k in result.logged or [] if "/" in k) or "nothing"
            self.study.tell(trial, state=_state("FAIL"))
            raise LitGpuError(
                messages.SWEEP_METRIC_NOT_LOGGED.format(metric=metric, number=number, logged=logged)
            )
        elif not math.isfinite(result.value):
            self._fail(trial, f"{metric} is {result.value}")
        else:
            value = fmt(result.value)
            messages.tell(SWEEP_TRIAL_FINISHED.format(number=number, metric=metric, value=value))
            self.study.tell(trial, result.value)

    def _fail(self, trial: Any, reason: str) -> None:
        trial.set_user_attr("error", reason)
        messages.tell(SWEEP_TRIAL_FAILED.format(number=trial.number, reason=reason))
        self.study.tell(trial, state=_state("FAIL"))


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


# ---- owners ----------------------------------------------------------------------------------------------
HEARTBEAT_S = 30.0
STALE_AFTER_S = 180.0
LOCK_NAME = ".trial_claims.lock"


def write_owner(path: Path, owner: Owner) -> None:
    """Write the owner record atomically (a fresh temp name: never through a planted link)."""
    with atomic_file(path, "w") as f:
        f.write(json.dumps(asdict(owner)))


def remove_owner(path: Path) -> None:
    """Drop the owner record (the trial is finished)."""
    with contextlib.suppress(OSError):
        path.unlink()


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` from ``/proc`` (``None`` where unknown): tells a reused pid apart."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def alive(pid: int | None, started: str | None) -> bool:
    """Whether process ``pid`` (started at ``started``) still runs on this host."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = process_start(pid)
    return started is None or now is None or now == started


def stale_reason(owner: Owner | None, started_at: dt.datetime | None, now: float | None = None) -> str | None:
    """Why a RUNNING trial with this owner record may be continued by another worker, else ``None``."""
    now = time.time() if now is None else now
    if owner is None:
        age = None if started_at is None else dt.datetime.now() - started_at
        if age is None or age.total_seconds() > STALE_AFTER_S:
            return "its worker left no record"
        return None
    if owner.state == "stopped":
        return "stopped by a signal"
    if owner.host == socket.gethostname():
        if alive(owner.pid, owner.started) or alive(owner.child_pid, owner.child_started):
            return None
        return f"its worker (pid {owner.pid}) died"
    if now - owner.beat > STALE_AFTER_S:
        return f"no heartbeat from {owner.host} for {now - owner.beat:.0f} s"
    return None


@contextlib.contextmanager
def claims_lock(sweep_dir: Path) -> Iterator[None]:
    """Exclusive lock of the sweep folder while a worker picks its next trial."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / LOCK_NAME, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class Heartbeat:
    """This worker's owner record of its current trial, refreshed by a daemon thread."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.owner: Owner | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, path: Path) -> None:
        """Claim the trial whose owner record is ``path`` (under :func:`claims_lock`); start beating."""
        pid = os.getpid()
        self.path = path
        self.owner = Owner(pid=pid, host=socket.gethostname(), beat=time.time(), started=process_start(pid))
        write_owner(path, self.owner)
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="lit-gpu-sweep-heartbeat", daemon=True)
        self._thread.start()

    def set_child(self, pid: int) -> None:
        """Record the trial's child process (it may outlive this worker for a moment)."""
        with self._lock:
            if self.owner is not None and self.path is not None:
                self.owner.child_pid, self.owner.child_started = pid, process_start(pid)
                write_owner(self.path, self.owner)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock, contextlib.suppress(OSError):
                if self.owner is not None and self.path is not None:
                    self.owner.beat = time.time()
                    write_owner(self.path, self.owner)

    def stop(self, stopped: bool) -> None:
        """End the heartbeat: ``stopped`` leaves the record for the next worker, else it is removed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self.path is not None and self.owner is not None:
                if stopped:
                    self.owner.state = "stopped"
                    write_owner(self.path, self.owner)
                else:
                    remove_owner(self.path)
            self.path, self.owner, self._thread = None, None, None


# ---- gpus ------------------------------------------------------------------------------------------------
LEASE_LIMITS = dataclasses.replace(JSON_LIMITS, max_bytes=4096, max_depth=2)  # a list of GPU ordinals

_MANY = 1 << 16  # "as many as asked": counts an explicit device list without a GPU query


def device_count(devices: Any, accelerator: Any) -> int:
    """How many processes ``trainer.devices`` starts (``0``: unknown, treat as several).

    Reads the request as :mod:`lit_gpu.devices` does (``free:N``, :func:`~lit_gpu.devices.device_ordinals`).
    """
    free = parse_free_request(devices)
    if free is not None:
        return free
    if isinstance(devices, bool) or devices in (-1, "-1"):
        return 0
    if devices in (None, "auto"):
        if str(accelerator).lower() == "cpu":
            return 1
        from lightning.fabric.accelerators.cuda import num_cuda_devices

        return max(1, num_cuda_devices())
    try:
        return len(lit_devices.device_ordinals(devices, _MANY))
    except (TypeError, ValueError):
        return 0


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
    return device_count(get("devices", "auto"), get("accelerator", "auto")) != 1


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
            tail = path.stem.rsplit("@", 1)[1]
            if not (tail.isascii() and tail.isdigit() and 0 < len(tail) <= 10 and 0 < int(tail) < 2**31):
                continue  # not a lease this module wrote (a pid is a positive C int)
            pid = int(tail)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                path.unlink(missing_ok=True)  # a worker that died without releasing
                continue
            except PermissionError:
                pass
            with contextlib.suppress(OSError, BadFileError):
                ordinals = read_json(path, LEASE_LIMITS)
                for ordinal in ordinals if isinstance(ordinals, list) else ():
                    if isinstance(ordinal, int) and 0 <= ordinal < 1024:
                        held[ordinal] = held.get(ordinal, 0) + 1
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
