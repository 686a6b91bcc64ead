"""``lit-gpu init [DIR]``: a small research project on lit_gpu's shipped recipes, ready to train.

Writes four files into DIR (default: the working folder), never over an existing one:

* ``my_research.py``: a net of your own (``forward``) and a ``RegressionModule`` subclass with
  its own loss (``compute_loss``);
* ``config.yaml``: swaps them into the shipped ``lit_gpu:simple`` recipe (composed on the command line);
* ``notebook.ipynb``: trains the same configs from Python and plots the curves;
* ``README.md``: five lines, the commands.

The first ``lit-gpu fit`` runs offline on a CPU (seeded synthetic data) in well under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

INIT_WOULD_OVERWRITE = (
    "lit-gpu init {folder}: {files} already exist; nothing was written; pick an empty or new folder"
)
INIT_NOT_A_FOLDER = "lit-gpu init {folder}: {folder} is a file, not a folder; name a new or empty folder"
INIT_WROTE = "wrote {files} into {folder}; next: {next}"
INIT_DANGLING_LINK = (
    "lit-gpu init {folder}: {folder} is a link to {target}, which does not exist; "
    "create {target} first, or remove the link, or name another folder"
)
INIT_PARENT_IS_FILE = (
    "lit-gpu init {folder}: cannot create the folder: {blocker} is a file, not a folder; "
    "name a folder whose parents are folders (or move {blocker} away)"
)
INIT_NO_PERMISSION = (
    "lit-gpu init {folder}: cannot write {path}: permission denied; "
    "name a folder you can write to (e.g. under your home folder), or get write permission there"
)
INIT_CANNOT_WRITE = (
    "lit-gpu init {folder}: cannot write {path}: {reason}; no file of the project was left there; "
    "name another folder"
)

MODULE = "my_research"
RECIPES = ("lit_gpu:simple", "lit_gpu:trainer/cpu")
FIT_ARGS = [arg for name in (*RECIPES, "config.yaml") for arg in ("--config", name)]
FIT = "PYTHONPATH=. lit-gpu fit " + shlex.join(FIT_ARGS)

CODE = '''"""Your research code, trained by lit-gpu from config.yaml (see README.md).

A net is a plain torch module; the LightningModule subclass changes one thing (the loss) and inherits
the rest from lit_gpu: optimizer and scheduler from the config, logging, checkpoints, every device mode.
"""

import torch
from torch import nn
from torch.nn import functional as F
from typing_extensions import override

from lit_gpu.modules import RegressionModule


class ResidualMLP(nn.Module):
    """A linear path plus a small MLP: ``x -> skip(x) + body(x)``."""

    def __init__(self, in_features: int = 10, out_features: int = 10, hidden: int = 32) -> None:
        super().__init__()
        self.skip = nn.Linear(in_features, out_features)
        self.body = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, out_features))

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.skip(x) + self.body(x)


class HuberRegression(RegressionModule):
    """lit_gpu's RegressionModule with a Huber loss (robust to outliers) instead of MSE."""

    def __init__(self, net: nn.Module, delta: float = 1.0, **kwargs) -> None:
        super().__init__(net, **kwargs)
        self.delta = delta

    @override
    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.huber_loss(outputs.float(), targets.float(), delta=self.delta)
'''

CONFIG = f"""# Your classes on the shipped recipe lit_gpu:simple (`lit-gpu configs simple` shows it). Run:
#   {FIT}
# A YAML file cannot include another: the recipes are composed on the command line, later ones win.
# Here only what differs: your module and net (init_args they do not name come from the recipe), the data's
# teacher, and the epochs. `--print_config` after the command shows the merged result.
model:
  class_path: {MODULE}.HuberRegression
  init_args:
    delta: 0.5
    net:
      class_path: {MODULE}.ResidualMLP
      init_args:
        hidden: 64
data:
  init_args:
    teacher: relu  # a nonlinear target: the MLP has something to learn beyond the linear path
trainer:
  max_epochs: 5
"""

README = "\n".join(
    [
        f"# {{title}}: your net and loss (`{MODULE}.py`) on lit_gpu's recipes (`lit-gpu configs` lists them)",
        f"Train, from this folder (`PYTHONPATH=.` lets lit-gpu import `{MODULE}`): `{FIT}`",
        "Runs: `runs/lit_gpu/version_N/` (`lit-gpu plot` draws the newest); `notebook.ipynb` trains it too.",
        "On a GPU: `lit_gpu:trainer/gpu` (or `trainer/ddp`, `bf16`...) in place of `lit_gpu:trainer/cpu`.",
        f"Test the last checkpoint: `PYTHONPATH=. lit-gpu test {shlex.join(FIT_ARGS)} --ckpt_path last`",
        "",
    ]
)

NOTEBOOK_CELLS = [
    (
        "markdown",
        f"# Train `{MODULE}` with lit_gpu\n\n"
        f"The same run as `{FIT}`, from Python: `LitGpuCLI` is the class behind the `lit-gpu` command.",
    ),
    (
        "code",
        "from IPython.display import Image, display\n\n"
        "from lit_gpu.cli import LitGpuCLI\n"
        "from lit_gpu.commands.plot import plot_run\n\n"
        "CONFIGS = " + json.dumps(FIT_ARGS) + "\n"
        'cli = LitGpuCLI(args=["fit", *CONFIGS, "--trainer.enable_progress_bar", "false"])\n'
        'print("run folder:", cli.trainer.log_dir)\n'
        'print("val/loss:", round(cli.trainer.callback_metrics["val/loss"].item(), 4))',
    ),
    ("code", "display(Image(filename=str(plot_run(cli.trainer.log_dir))))"),
]


def notebook() -> str:
    """The project's notebook (nbformat 4, outputs empty) as JSON text."""
    cells = []
    for kind, text in NOTEBOOK_CELLS:
        cell = {"cell_type": kind, "id": f"cell-{len(cells)}", "metadata": {}}
        cell["source"] = text.splitlines(True)
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    content = {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(content, indent=1) + "\n"


def project_files(title: str) -> dict[str, str]:
    """File name -> text of the project :func:`init` writes."""
    return {
        "README.md": README.format(title=title),
        "config.yaml": CONFIG,
        f"{MODULE}.py": CODE,
        "notebook.ipynb": notebook(),
    }


def _blocking_file(folder: Path) -> Path | None:
    """The nearest existing ancestor of ``folder`` when it is not a folder (``mkdir -p`` cannot pass it)."""
    for parent in folder.absolute().parents:
        if parent.exists() or parent.is_symlink():
            return None if parent.is_dir() else parent
    return None


def _cannot_write(folder: Path, path: Path, err: OSError) -> LitGpuError:
    blocker = _blocking_file(path)
    if blocker is not None:
        return LitGpuError(INIT_PARENT_IS_FILE.format(folder=folder, blocker=blocker))
    if isinstance(err, PermissionError):
        return LitGpuError(INIT_NO_PERMISSION.format(folder=folder, path=err.filename or path))
    reason = err.strerror or messages.first_line(err)
    return LitGpuError(INIT_CANNOT_WRITE.format(folder=folder, path=err.filename or path, reason=reason))


def init(folder: str | Path) -> list[Path]:
    """Write the project into ``folder`` (created if missing); returns the files written.

    Raises:
        LitGpuError: one of the files already exists, ``folder`` is a file or a link to nothing, or it
            cannot be created or written (nothing is left behind then).
    """
    folder = Path(folder)
    if folder.is_symlink() and not folder.exists():
        raise LitGpuError(INIT_DANGLING_LINK.format(folder=folder, target=os.readlink(folder)))
    files = project_files(folder.resolve().name or MODULE)
    taken = [name for name in files if (folder / name).exists()]
    if folder.exists() and not folder.is_dir():
        raise LitGpuError(INIT_NOT_A_FOLDER.format(folder=folder))
    if taken:
        raise LitGpuError(INIT_WOULD_OVERWRITE.format(folder=folder, files=", ".join(taken)))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _cannot_write(folder, folder, err) from err
    written: list[Path] = []
    for name, text in files.items():
        try:
            with open(folder / name, "x", encoding="utf-8") as f:  # "x": never replaces a file
                written.append(folder / name)
                f.write(text)
        except OSError as err:
            for path in written:  # a half-written project is litter: the files written so far go
                path.unlink(missing_ok=True)
            raise _cannot_write(folder, folder / name, err) from err
    return written


def main(argv: Sequence[str]) -> int:
    """``lit-gpu init [DIR]``."""
    parser = argparse.ArgumentParser(
        prog="lit-gpu init",
        allow_abbrev=False,
        description="Write a small research project (your net, your module, a config on the shipped "
        "recipes, a notebook, a README) into DIR; refuses to overwrite files.",
    )
    parser.add_argument("dir", nargs="?", default=".", help="project folder (default: this folder)")
    args = parser.parse_args(list(argv))
    written = init(args.dir)
    step = FIT if args.dir == "." else f"cd {shlex.quote(args.dir)} && {FIT}"
    names = ", ".join(p.name for p in written)
    messages.tell(INIT_WROTE.format(files=names, folder=args.dir, next=step), stream=sys.stdout)
    return 0
