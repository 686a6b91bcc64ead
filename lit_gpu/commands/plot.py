"""Plots of a run: ``lit-gpu plot RUN_DIR`` turns ``metrics.csv`` into a PNG of its curves.

Also :func:`confusion_matrix` and :func:`plot_confusion_matrix` for notebooks. Figures are drawn
with matplotlib's object API on an Agg canvas (the global pyplot backend is never touched, so
notebooks keep their inline backend) at a fixed size and dpi: a curves PNG is always
:data:`CURVES_SIZE_PX` pixels.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.checkpoints.contracts import inside
from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.errors import LitGpuError
from lit_gpu.run import layout
from lit_gpu.textfiles import METRICS_FIX, csv_dicts, open_regular

DPI = 100
CURVES_FIGSIZE = (12.0, 4.5)  # inches
CURVES_SIZE_PX = (1200, 450)  # (width, height) of plot_run's PNG
CONFUSION_FIGSIZE = (6.0, 5.5)
CONFUSION_SIZE_PX = (600, 550)
MAX_CURVES = 24  # curves per panel: a file with thousands of loss columns still draws in a second

Series = dict[str, list[tuple[float, float]]]


METRICS_LINKS_OUT = (
    "not reading {csv}: it is a link that leads out of its run folder; plot reads only a run's own "
    "metrics.csv (pass the CSV file itself if you trust where the link goes)"
)


def find_metrics(run_dir: str | os.PathLike) -> Path:
    """The ``metrics.csv`` of a run.

    Args:
        run_dir: A run folder (``runs/lit_gpu/version_0``), the CSV itself, a logger folder
            (``runs/lit_gpu``) or a root (``runs``, any ``--trainer.default_root_dir``): then the
            newest ``version_*`` holding a CSV is used.

    Raises:
        LitGpuError: No ``metrics.csv`` found.
    """
    path = Path(run_dir)
    if path.is_file():
        return path  # the CSV itself, named by the user
    own = path / layout.METRICS_NAME
    if os.path.lexists(own):
        if not inside(own, path):  # a link out of the run folder: never read (nor quoted in an error)
            raise LitGpuError(METRICS_LINKS_OUT.format(csv=messages.shown(own)))
        if own.is_file():
            return own
    nested = sorted(p for p in path.glob("*") if p.is_dir())
    for parents in ([path], nested):  # runs in path, else in path/NAME (a root)
        # only runs really inside ``path`` and files really inside their run: a version_N or a
        # metrics.csv planted as a link elsewhere is passed over
        found = [
            csv
            for parent in parents
            for run in layout.list_runs(parent)
            if (csv := run.path / layout.METRICS_NAME).is_file()
            and inside(run.path, path)
            and inside(csv, run.path)
        ]
        if found:
            return max(found, key=lambda p: p.stat().st_mtime)
    raise LitGpuError(
        f"no metrics.csv in {path}; pass a run folder such as runs/lit_gpu/version_0 "
        "(written by lit-gpu fit with its default CSV logger)"
    )


def open_metrics(run_dir: str | os.PathLike) -> tuple[Path, Any]:
    """:func:`find_metrics`'s CSV, opened for binary reading; a run's own file checked on what was opened.

    The checks of :func:`find_metrics` name a path; a link swapped in after them would be followed by a
    second open. So the file opened is the one checked: a regular file (``fstat`` of the open file), whose
    real path is inside its run folder and is that same file (device and inode), whatever the path leads to
    by the time it is read. A CSV the user named itself is opened as it is.

    Raises:
        LitGpuError: No ``metrics.csv``, or the opened file is not inside its run folder.
    """
    named = Path(run_dir).is_file()  # the CSV named by the user: opened as it is
    csv = find_metrics(run_dir)
    f = open_regular(csv, METRICS_FIX)
    if named:
        return csv, f
    try:
        opened = os.fstat(f.fileno())
        real = os.path.realpath(csv)
        try:
            now = os.stat(real)
        except OSError:
            now = None
        same = now is not None and (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)
        if not (same and inside(real, csv.parent)):
            raise LitGpuError(METRICS_LINKS_OUT.format(csv=messages.shown(csv)))
    except BaseException:
        f.close()
        raise
    return csv, f


#: points kept of one curve: a longer curve is thinned to an even stride (see :func:`read_metrics`)
MAX_POINTS = 4096
#: points kept of all the curves of one file together (a file of many columns keeps fewer of each)
MAX_ALL_POINTS = 1 << 18
_MIN_POINTS = 16


class _Curve:
    """One column's points, at most ``cap`` (+ the last): every ``stride``-th point of the column, the
    stride doubling (every other kept point dropped) each time the curve is full."""

    __slots__ = ("cap", "count", "last", "points", "stride")

    def __init__(self, cap: int) -> None:
        self.cap, self.count, self.stride = cap, 0, 1
        self.points: dict[float, float] = {}
        self.last: tuple[float, float] | None = None

    def add(self, x: float, y: float) -> None:
        if self.count % self.stride == 0 or x in self.points:  # a kept step written again: the later row wins
            self.points[x] = y
            if len(self.points) > self.cap:
                kept = sorted(self.points)[::2]
                self.points = {step: self.points[step] for step in kept}
                self.stride *= 2
        self.count += 1
        self.last = (x, y)

    def sorted_points(self) -> list[tuple[float, float]]:
        points = dict(self.points)
        if self.last is not None:
            points[self.last[0]] = self.last[1]  # the newest value is always drawn
        return sorted(points.items())


def read_metrics(run_dir: str | os.PathLike) -> Series:
    """Every numeric column of a run's ``metrics.csv`` as ``{name: [(step, value), ...]}``.

    Empty cells are skipped (Lightning writes step and epoch metrics on separate rows). The x value
    is the ``step`` column, or the row number when there is none. Points come sorted by step, one per
    step: where a step repeats (a file that several attempts of a restarted run appended to), the
    later row wins, as the resumed attempt's value is the one the run continued from. The file is
    streamed through :func:`lit_gpu.textfiles.csv_dicts` (its budgets: field and line size).

    Memory does not grow with the file: a curve keeps at most :data:`MAX_POINTS` points
    (:data:`MAX_ALL_POINTS` for all the columns of the file together, at least 16 each). Its
    points are every ``stride``-th value of the column, the stride doubling (every other kept point
    dropped) each time the curve is full, and its last value is always kept: a long run's curve is
    drawn from evenly spaced samples of it, up to its newest value. A figure 1200 pixels wide shows no
    more.
    """
    return _series(*open_metrics(run_dir))


def _series(csv: Path, f: Any) -> Series:
    """The curves of the CSV ``csv``, read from ``f`` (its open file; see :func:`read_metrics`)."""
    header, rows = csv_dicts(csv, fix=METRICS_FIX, file=f)
    columns = max(1, len([name for name in header if name not in ("step", "epoch")]))
    cap = max(_MIN_POINTS, min(MAX_POINTS, MAX_ALL_POINTS // columns))
    curves: dict[str, _Curve] = {}
    for row_number, row in enumerate(rows):
        step = _number(row.get("step"))
        x = float(row_number) if step is None else step
        for name, cell in row.items():
            if not cell or name in ("step", "epoch"):
                continue
            value = _number(cell)
            if value is None:
                continue
            curve = curves.get(name)
            if curve is None:
                curve = curves[name] = _Curve(cap)
            curve.add(x, value)
    return {name: curve.sorted_points() for name, curve in curves.items()}


def _number(cell: str | None) -> float | None:
    if cell is None or cell.strip() == "":
        return None
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) and abs(value) < _PLOTTABLE else None


_PLOTTABLE = 1e300  # beyond it matplotlib's axis arithmetic overflows


def plain_label(text: object) -> str:
    """``text`` from a file as a matplotlib label: one safe line (:func:`messages.shown`), ``$`` escaped
    so that it is never read as mathtext, and no leading ``_`` (which would hide it from the legend)."""
    label = messages.shown(text, limit=80).replace("$", r"\$")
    return "\u200a" + label if label.startswith("_") else label


def _label(name: str) -> str:
    for suffix in ("_step", "_epoch"):
        if name.endswith(suffix):
            return plain_label(f"{name.removesuffix(suffix)} ({suffix[1:]})")
    return plain_label(name)


def _panel(ax, series: Series, names: Iterable[str], title: str) -> None:
    for name in list(names)[:MAX_CURVES]:
        points = series[name]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        many = len(points) > 20
        style = {"linewidth": 0.8, "alpha": 0.6} if name.endswith("_step") else {"linewidth": 1.6}
        ax.plot(xs, ys, marker=None if many else "o", markersize=3, label=_label(name), **style)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def _mark_evaluations(axes: dict[str, Any], run: Path) -> None:
    """Mark each evaluation of the run (``evaluations/<command>_<k>/metrics.csv``) at its checkpoint's step.

    An evaluation logs its metrics at the step of the checkpoint it evaluated, so ``test/loss`` of
    ``last.ckpt`` sits at the end of the training curve, as a star labelled with the evaluation's folder.
    """
    marked = set()
    for folder in layout.evaluations(run):
        if not (folder / layout.METRICS_NAME).is_file():
            continue
        try:
            series = read_metrics(folder)
        except (LitGpuError, OSError):
            continue  # an unreadable evaluation does not stop the plot of the run
        for name, points in sorted(series.items()):
            metric = name.split("/")[-1]
            title = "loss" if metric.startswith("loss") else "accuracy" if metric.startswith("acc") else None
            ax = axes.get(title or "")
            if ax is None or not points:
                continue
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            ax.scatter(
                xs, ys, marker="*", s=90, zorder=3, label=f"{_label(name)} ({plain_label(folder.name)})"
            )
            marked.add(title)
    for title in marked:
        axes[title].legend(fontsize="small")


def plot_run(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Draw a run's loss curves (train per step and per epoch, val, test) and accuracy, if logged.

    The run's evaluations (``validate``/``test``/``predict`` of its checkpoints, each in
    ``evaluations/<command>_<k>/``) are marked on the curves at the step of the checkpoint evaluated.

    Args:
        run_dir: See :func:`find_metrics`.
        out: PNG to write; default ``curves.png`` beside ``metrics.csv``.

    Returns:
        The PNG path. Its size is always :data:`CURVES_SIZE_PX`.

    Raises:
        LitGpuError: No ``metrics.csv``, or no loss/accuracy column in it.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    csv_path, f = open_metrics(run_dir)
    series = _series(csv_path, f)
    loss = sorted(n for n in series if n.split("/")[-1].startswith("loss"))
    acc = sorted(n for n in series if n.split("/")[-1].startswith("acc"))
    panels = [(names, title) for names, title in ((loss, "loss"), (acc, "accuracy")) if names]
    if not panels:
        raise LitGpuError(
            f"{messages.shown(csv_path)} has no loss or accuracy column "
            f"(columns: {messages.shown(', '.join(series) or 'none')}); "
            "pass the run folder of a lit-gpu fit (its CSV logger writes loss and accuracy columns)"
        )
    fig = Figure(figsize=CURVES_FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (names, title) in zip(axes, panels, strict=True):
        _panel(ax, series, names, title)
    _mark_evaluations(dict(zip([title for _, title in panels], axes, strict=True)), csv_path.parent)
    fig.suptitle(plain_label(csv_path.parent))
    fig.tight_layout()
    out_path = Path(out) if out is not None else csv_path.parent / "curves.png"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # atomically, replacing the file (a symlink planted as curves.png is replaced, not written through)
    with atomic_file(out_path) as f:
        fig.savefig(f, dpi=DPI, format="png")  # no bbox_inches="tight": the pixel size stays fixed
    return out_path


@torch.no_grad()
def confusion_matrix(
    model: torch.nn.Module,
    dataloader: Iterable,
    num_classes: int,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Confusion matrix ``(num_classes, num_classes)`` of ``model`` on ``dataloader`` (rows: true class).

    Args:
        model: A net or LightningModule returning logits or probabilities ``(B, num_classes)``.
        dataloader: Yields ``(inputs, targets)`` batches.
        num_classes: Number of classes.
        device: Where to run the model.
    """
    from torchmetrics.classification import MulticlassConfusionMatrix

    metric = MulticlassConfusionMatrix(num_classes=num_classes).to(device)
    was_training = model.training
    model.eval()
    model.to(device)
    try:
        for batch in dataloader:
            inputs, targets = batch[0].to(device), batch[1].to(device)
            metric.update(model(inputs).argmax(dim=-1), targets)
    finally:
        model.train(was_training)
    return metric.compute().cpu()


def plot_confusion_matrix(
    matrix: torch.Tensor,
    out: str | os.PathLike,
    class_names: Sequence[str] | None = None,
    title: str = "confusion matrix",
) -> Path:
    """Write a confusion matrix (rows: true class, columns: predicted) as a :data:`CONFUSION_SIZE_PX` PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    counts = torch.as_tensor(matrix).cpu().long()
    n = counts.shape[0]
    names = list(class_names) if class_names is not None else [str(i) for i in range(n)]
    fig = Figure(figsize=CONFUSION_FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    image = ax.imshow(counts.numpy(), cmap="Blues")
    fig.colorbar(image, ax=ax)
    ax.set_xticks(range(n), names)
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    accuracy = counts.diag().sum().item() / max(counts.sum().item(), 1)
    ax.set_title(f"{title} (accuracy {accuracy:.1%})")
    threshold = counts.max().item() / 2
    if n <= 20:
        for i in range(n):
            for j in range(n):
                value = counts[i, j].item()
                color = "white" if value > threshold else "black"
                ax.text(j, i, str(value), ha="center", va="center", fontsize="x-small", color=color)
    fig.tight_layout()
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(out_path) as f:  # replaces a planted symlink instead of writing through it
        fig.savefig(f, dpi=DPI, format="png")
    return out_path


def main(argv: Sequence[str]) -> int:
    """``lit-gpu plot [RUN_DIR] [--out PNG]``."""
    parser = argparse.ArgumentParser(
        prog="lit-gpu plot",
        allow_abbrev=False,
        description="Plot a run's loss and accuracy curves from its metrics.csv.",
    )
    parser.add_argument(
        "run_dir",
        nargs="?",
        default="runs",
        help="run folder (runs/lit_gpu/version_0), its metrics.csv, or a root "
        "(a --trainer.default_root_dir): its newest run (default: runs)",
    )
    parser.add_argument("--out", default=None, help="PNG to write (default: curves.png beside metrics.csv)")
    args = parser.parse_args(list(argv))
    path = plot_run(args.run_dir, args.out)
    messages.tell(
        messages.WROTE_PLOT.format(path=path, width=CURVES_SIZE_PX[0], height=CURVES_SIZE_PX[1]),
        stream=sys.stdout,
    )
    return 0
