"""``lit-gpu sweep``: hyperparameter search with Optuna over the same configs as ``lit-gpu fit``.

    lit-gpu sweep --config configs/simple.yaml --search configs/sweeps/simple.yaml --n_trials 20
    lit-gpu sweep --config configs/simple.yaml --search configs/sweeps/simple.yaml --until_complete 20

Every trial is a normal ``lit-gpu fit`` run (the user's configs and flags, then ``--key=value`` for the
sampled parameters) logging to ``runs/sweeps/<study>/version_<trial number>/`` with its ``config.yaml``
and checkpoints. The study lives in an Optuna storage: by default a journal file next to the runs,
or an RDB URL (``sqlite:///...``, ``postgresql://...``) for workers on many machines. ``--n_trials N``
adds N trials; ``--until_complete N`` runs until the study holds N finished trials, however often the
command is restarted. A trial stopped by SIGINT/SIGTERM (``last.ckpt`` saved) or whose worker died
(SIGKILL, node loss: see :mod:`.owners`) is continued from its ``last.ckpt`` with the same parameters,
as the same trial, by the next worker. At the end: a table of the best trials, ``best.yaml`` and
``sweep.png``.

Rooms: :mod:`.options` (flags), :mod:`.study` (storage, sampler, pruner), :mod:`.pruning` (the
callback), :mod:`.trial` (one fit, in or out of process), :mod:`.gpus` (placement, GPU claims),
:mod:`.owners` (heartbeats, stale trials), :mod:`.worker` (the trial loop), :mod:`.fitargs` (checking
the fit arguments), :mod:`.report` (table, plot), :mod:`.best` (best.yaml), :mod:`.space` (search
spaces). Optuna is imported only when a sweep runs (``pip install 'lit-gpu[sweep]'``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from lit_gpu import messages
from lit_gpu.commands.sweep import worker as lines
from lit_gpu.commands.sweep.options import JOURNAL_NAME, SWEEPS_ROOT, SweepOptions, parse_argv
from lit_gpu.commands.sweep.space import (
    SearchSpace,
    best_config,
    check_space_keys,
    load_space,
    logger_flag,
    parse_fit_args,
    short_names,
    write_best_config,
)
from lit_gpu.commands.sweep.storage import check_params, read_trial
from lit_gpu.commands.sweep.study import (
    completed,
    make_storage,
    open_study,
    plot_study,
    print_table,
    quiet_optuna,
    require_optuna,
)
from lit_gpu.commands.sweep.trial import TRIAL_ENV, run_trial_child, trial_spec
from lit_gpu.commands.sweep.worker import GpuClaims, Worker, device_count, needs_child_process


def report(study, options: SweepOptions, space: SearchSpace, fit_args: list[str]) -> int:
    """Table, best.yaml and sweep.png; exit status 1 when no trial has completed yet."""
    storage = options.storage or str(options.sweep_dir / JOURNAL_NAME)
    records = [read_trial(t, options.sweep_dir, None, storage) for t in study.get_trials(deepcopy=False)]
    print_table(study, records, options.metric, options.top)
    done = completed(records, options.direction == "maximize")
    if not done:
        messages.tell(lines.SWEEP_NOTHING_COMPLETE.format(study=study.study_name))
        return 1
    best = done[0]
    check_params(best.params, space, best.number, storage)  # best.yaml takes nothing else from storage
    out = write_best_config(
        options.sweep_dir / "best.yaml",
        study.study_name,
        options.metric,
        best,
        best_config(fit_args, space, best),
    )
    png = plot_study(study, options.sweep_dir / "sweep.png", options.metric)
    messages.tell(lines.SWEEP_WROTE_BEST.format(path=out))
    messages.tell(lines.SWEEP_WROTE_PLOT.format(path=png))
    return 0


def sweep(options: SweepOptions, fit_args: list[str]) -> int:
    """Run this worker's trials of the study, then report."""
    require_optuna()
    space = load_space(options.search)
    probe = Worker(options, space, fit_args, child=False, study=None)
    gpus = list(range(options.gpus_per_trial)) if options.gpus_per_trial else None
    check_space_keys(space, parse_fit_args(probe.trial_args({}, 0, gpus)))
    trainer_config = parse_fit_args(probe.trial_args(space.first_values(), 0, gpus))["trainer"]
    child = needs_child_process(trainer_config, options.gpus_per_trial)
    with quiet_optuna():
        study = open_study(options)
        worker = Worker(options, space, fit_args, child=child, study=study)
        how = ", each in a child process" if child else ""
        more = (
            options.n_trials if options.until_complete is None else f"until {options.until_complete} finished"
        )
        messages.tell(
            lines.SWEEP_START.format(
                study=options.study, done=len(study.trials), more=more, folder=options.sweep_dir, how=how
            )
        )
        code = worker.run()
        if code is not None:
            return code
        return report(study, options, space, fit_args)


def main(argv: Sequence[str]) -> int:
    """``lit-gpu sweep --config ... --search SPACE.yaml --n_trials N [...]`` (see :mod:`.options`)."""
    spec = os.environ.get(TRIAL_ENV)
    if spec:  # a trial's child process (or one of its DDP ranks), started by run_in_child
        return run_trial_child(trial_spec(spec))
    options, fit_args = parse_argv(argv)
    return sweep(options, fit_args)


__all__ = [
    "JOURNAL_NAME",
    "SWEEPS_ROOT",
    "TRIAL_ENV",
    "GpuClaims",
    "SweepOptions",
    "Worker",
    "device_count",
    "logger_flag",
    "main",
    "make_storage",
    "needs_child_process",
    "open_study",
    "parse_argv",
    "short_names",
    "sweep",
]
