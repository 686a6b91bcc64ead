"""The end-of-sweep report: a table of the best trials and ``sweep.png`` (history, importances)."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

from lit_gpu import messages
from lit_gpu.commands.plot import plain_label
from lit_gpu.commands.sweep.fitargs import fmt, short_names
from lit_gpu.commands.sweep.storage import TrialRecord

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
