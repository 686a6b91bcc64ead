"""One sweep worker: pick a trial (a stopped one to continue first, else a new one), run it, record it."""

from __future__ import annotations

import gc
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lit_gpu import messages, sweep_lines
from lit_gpu.commands.sweep import metrics_csv
from lit_gpu.commands.sweep.fitargs import fmt, logger_flag, short_names
from lit_gpu.commands.sweep.gpus import GpuClaims
from lit_gpu.commands.sweep.options import JOURNAL_NAME, SweepOptions
from lit_gpu.commands.sweep.owners import Heartbeat, claims_lock, stale_reason
from lit_gpu.commands.sweep.pruning import SweepPruning
from lit_gpu.commands.sweep.space import SearchSpace, format_value
from lit_gpu.commands.sweep.trial import TrialResult, run_in_child, run_in_process
from lit_gpu.errors import LitGpuError
from lit_gpu.files.sweep_storage import (
    TrialRecord,
    check_params,
    owner_path,
    read_owner,
    read_trial,
    trial_folder,
)
from lit_gpu.run.layout import CHECKPOINTS, refuse_links_out_of
from lit_gpu.upstream.tools import trial_id

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
                    messages.tell(sweep_lines.SWEEP_WAITING.format(finished=self.finished(), target=target))
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
                messages.tell(sweep_lines.SWEEP_INTERRUPTED.format(number=trial.number, folder=run_dir))
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
                sweep_lines.SWEEP_TRIAL_START.format(
                    number=trial.number, params=shown, gpus=where, folder=run_dir
                )
            )
        else:
            trial.set_user_attr("resumed", pick.record.resumed + 1)
            start = str(last) if last.is_file() else "the start (no last.ckpt)"
            if last.is_file():
                args.append(f"--ckpt_path={last}")
            messages.tell(
                sweep_lines.SWEEP_TRIAL_CONTINUE.format(
                    number=trial.number, why=pick.why, params=shown, gpus=where, start=start
                )
            )
        trial.set_user_attr("args", args)
        reported = pick.record.reported if pick.record else ()
        if pick.record is not None:
            metrics_csv.set_aside(run_dir)
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
                metrics_csv.put_back(run_dir)

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
            messages.tell(
                sweep_lines.SWEEP_TRIAL_PRUNED.format(number=number, step=step, metric=metric, value=value)
            )
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
            messages.tell(sweep_lines.SWEEP_TRIAL_FINISHED.format(number=number, metric=metric, value=value))
            self.study.tell(trial, result.value)

    def _fail(self, trial: Any, reason: str) -> None:
        trial.set_user_attr("error", reason)
        messages.tell(sweep_lines.SWEEP_TRIAL_FAILED.format(number=trial.number, reason=reason))
        self.study.tell(trial, state=_state("FAIL"))


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]
