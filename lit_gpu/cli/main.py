"""``lit-gpu``: the front door. Lists the commands, runs a tool command or LitGpuCLI, and turns known
failures into one line and exit 2.

The commands are one table, :data:`COMMANDS`: name -> (module whose ``main(argv) -> int`` runs it, one
line of help). Tool modules are imported only when their command runs, so ``lit-gpu --help``,
``--version``, ``configs`` and ``init`` import neither torch nor Lightning (this module
imports only the standard library, ``messages`` and ``errors``), ``lit-gpu env`` imports torch only, and
no module of :mod:`lit_gpu.commands` imports this dispatcher (commands sit above :mod:`lit_gpu.cli`).
"""

from __future__ import annotations

import difflib
import gc
import importlib
import os
import platform
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

# ---- texts (this module's alone) ------------------------------------------------------------------------
INTERRUPTED_OUTSIDE_RUN = "interrupted"
BAD_VARIABLE_IGNORED = "warning: {problem}; left out for this --help"

# LightningCLI's own subcommands (run by LitGpuCLI), then lit_gpu's tools (module path + main(argv)).
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")

COMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("lit_gpu.cli.lightning_cli", "train (and validate) a model from configs and flags"),
    "validate": ("lit_gpu.cli.lightning_cli", "run the validation set once on a model or checkpoint"),
    "test": ("lit_gpu.cli.lightning_cli", "evaluate a model or checkpoint on the test set"),
    "predict": ("lit_gpu.cli.lightning_cli", "write a model's predictions to a CSV file"),
    "env": ("lit_gpu.commands.env", "torch build, GPUs and their free memory, advice (--json)"),
    "bench": ("lit_gpu.commands.bench", "one job in several device modes: samples/s, epoch time, memory"),
    "export": ("lit_gpu.commands.export", "a checkpoint's net (weights + class) to load without lit_gpu"),
    "plot": ("lit_gpu.commands.plot", "a run's metrics.csv as a PNG of its loss and accuracy curves"),
    "sweep": ("lit_gpu.commands.sweep", "hyperparameter search (Optuna) over a search-space file"),
    "configs": ("lit_gpu.commands.configs", "list the recipes shipped with lit_gpu (--config lit_gpu:NAME)"),
    "init": ("lit_gpu.commands.init", "write a research project folder: a module, a config, a README"),
    "completion": ("lit_gpu.cli.completion", "a bash or zsh completion script (static: TAB runs no Python)"),
}

#: the commands that import neither torch nor Lightning (the launcher's variables are not theirs to check)
NO_UPSTREAM_IMPORT = ("configs", "init")
#: the commands that only report: a malformed launcher variable is one line of their report, never a refusal
DIAGNOSTICS = ("env",)

#: the exit status after Ctrl+C: lit_gpu.preemption's (not imported here: that imports Lightning)
INTERRUPT_EXIT_CODE = 128 + signal.SIGINT  # 130

# the distributions `--version` reports besides lit-gpu itself
KEY_DEPENDENCIES = ("torch", "lightning", "torchmetrics", "jsonargparse", "optuna", "nvidia-ml-py")

USAGE = "usage: lit-gpu COMMAND [options]     (lit-gpu COMMAND --help: that command's options)"
UNKNOWN_COMMAND = "unknown command {name!r}{hint} (all commands are listed above)"
DID_YOU_MEAN = "; did you mean {suggestion!r}?"
NO_COMMAND = "no command given (all commands are listed above)"


# ---- the package imported is this one ----------------------------------------------------------------
# The ``lit_gpu`` Python imported is this package, not a folder that is only named like it.
#
# Python started in the folder that holds a clone named ``lit_gpu`` (Jupyter or a notebook's kernel whose
# working folder is the clone's parent) finds the clone's folder first, through ``sys.path[0]``. That folder
# has no ``__init__.py``, so it becomes a namespace package, and it wins over an editable install
# (``pip install -e``: setuptools' finder is asked only after the path search). The submodules still load
# through that finder, but the package's ``__init__`` never ran: no ``lit_gpu.__version__``, no lazy
# ``lit_gpu.X`` attributes, no ``Trainer(strategy="dp")``. The entry points (:mod:`lit_gpu.cli`,
# :mod:`lit_gpu.demo`, a notebook's first import) call :func:`check_package`, which says so in one line.
PACKAGE_SHADOWED = (
    "Python took the folder {folder} for the package lit_gpu (it is on the path through the working folder "
    "{cwd}; no __init__.py there), not {package}: start Python or Jupyter in another folder (the clone "
    "itself, or its notebooks/), or rename that folder"
)

#: lit_gpu's own folder (this module is lit_gpu/cli/main.py)
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def shadowing_folder() -> str | None:
    """The folder imported as ``lit_gpu`` instead of this package, or None when all is well."""
    top = sys.modules.get("lit_gpu")
    if top is None or getattr(top, "__file__", None) is not None:
        return None  # not imported yet (a submodule loaded by path), or the real package
    folders = [str(p) for p in getattr(top, "__path__", [])]
    return folders[0] if folders and str(PACKAGE_DIR) not in folders else None


def check_package() -> None:
    """Raise ImportError naming the folder Python took for ``lit_gpu`` and the fix, if that happened."""
    folder = shadowing_folder()
    if folder is not None:
        raise ImportError(PACKAGE_SHADOWED.format(folder=folder, cwd=os.getcwd(), package=PACKAGE_DIR))


def help_text() -> str:
    """The usage line and every command with its one line of help."""
    width = max(len(name) for name in COMMANDS) + 2
    lines = [USAGE, "", "commands:"]
    lines += [f"  {name:<{width}}{text}" for name, (_, text) in COMMANDS.items()]
    lines += [
        "",
        "options:",
        f"  {'-h, --help':<{width + 2}}this list",
        f"  {'--version':<{width + 2}}the versions of lit_gpu and of its key dependencies",
        "",
        "Start with: lit-gpu fit --config configs/simple.yaml   (README.md, then docs/ by topic)",
    ]
    return "\n".join(lines)


def closest_command(name: str) -> str | None:
    """The command ``name`` most likely meant (difflib), or None when none is close."""
    match = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.5)
    return match[0] if match else None


def _version_of(distribution: str) -> str:
    from importlib import metadata  # here: 0.1-0.2 s of imports that only --version needs

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def version_text() -> str:
    """lit_gpu's version, Python's, and those of its key dependencies, read from package metadata."""
    lines = [f"lit-gpu {_version_of('lit-gpu')} (Python {platform.python_version()}, {sys.platform})"]
    lines += [f"  {name:<14}{_version_of(name)}" for name in KEY_DEPENDENCIES]
    return "\n".join(lines)


def _front_door(args: list[str]) -> int | None:
    """Answer ``--help``, ``--version``, no command or an unknown one; None: a command to run."""
    if not args:
        print(help_text(), file=sys.stderr)
        messages.tell_error(NO_COMMAND)
        return 2
    first = args[0]
    if first in ("-h", "--help"):
        print(help_text())
        return 0
    if first == "--version":
        print(version_text())
        return 0
    if first.startswith("-") or first in COMMANDS:  # top-level LightningCLI options, e.g. --config
        return None
    suggestion = closest_command(first)
    print(help_text(), file=sys.stderr)
    hint = DID_YOU_MEAN.format(suggestion=suggestion) if suggestion else ""
    messages.tell_error(UNKNOWN_COMMAND.format(name=first, hint=hint))
    return 2


def freeze_import_heap() -> None:
    """Move every object alive now (the modules torch and Lightning imported) out of the cyclic GC's reach.

    Importing Lightning leaves ~410,000 GC-tracked objects (torch, ``torch._dynamo``, sympy,
    torchmetrics) that live as long as the process. The interpreter's last collection at exit walks them
    all: 1.3-1.5 s of every ``lit-gpu`` process on a 2-core CPU, ~0.2 s after this (``gc.freeze``, made
    for this). Full collections during training skip them too. Objects created afterwards are collected
    as usual. Called by the ``lit-gpu`` command after its imports, not by ``main(argv)`` from Python: a
    notebook's or a test's heap is left alone.
    """
    gc.freeze()


def _run(args: list[str], from_python: bool) -> int | None:
    """A tool's exit status; None after a LightningCLI subcommand (``main`` returns, as LightningCLI)."""
    if args[0] in COMMANDS and args[0] not in LIGHTNING_SUBCOMMANDS:  # a tool: import it now, run it
        tool = importlib.import_module(COMMANDS[args[0]][0])
        if not from_python:
            freeze_import_heap()
        return int(tool.main(args[1:]) or 0)
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    if not from_python:
        freeze_import_heap()
    LitGpuCLI(args=args if from_python else None)
    return None


def _explain(err: BaseException) -> str | None:
    """:func:`lit_gpu.explain.explain`; a LitGpuError (``configs``, ``init``) without importing torch."""
    if isinstance(err, LitGpuError):
        return str(err)
    from lit_gpu.explain import explain

    return explain(err)


def _is_diagnostic(args: list[str]) -> bool:
    """``lit-gpu env`` or a command's ``--help``: runs nothing, so a bad variable never blocks it."""
    return args[0] in DIAGNOSTICS or any(arg in ("-h", "--help") for arg in args[1:])


def check_launch_env(args: list[str]) -> None:
    """A malformed launcher variable: one line and exit 2, before Lightning reads it; for a diagnostic,
    one line each and the run goes on (``env`` shows them in its advice; a ``--help`` runs without them,
    as Lightning would fail reading them on import)."""
    from lit_gpu import devices

    bad = devices.problems(os.environ)
    if not bad:
        return
    if not _is_diagnostic(args):
        messages.tell_error(next(iter(bad.values())))
        sys.exit(2)
    if args[0] in DIAGNOSTICS:
        return  # lit-gpu env reports them itself (devices.problems), Lightning is not imported
    for name, line in bad.items():
        messages.tell(BAD_VARIABLE_IGNORED.format(problem=line))
        del os.environ[name]


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``lit-gpu`` and ``python -m lit_gpu``; exits with the command's status."""
    from lit_gpu.cli import quiet

    quiet.install()  # here only: importing lit_gpu leaves warning and logging filters alone
    args = list(sys.argv[1:] if argv is None else argv)
    answered = _front_door(args)
    if answered is not None:
        sys.exit(answered)
    if args[0] not in NO_UPSTREAM_IMPORT:  # before Lightning and torchmetrics read them (some on import)
        check_launch_env(args)
    try:  # a run stopped by SIGINT/SIGTERM exits 130 / 143 (LitGpuCLI reads it from the trainer's state)
        code = _run(args, from_python=argv is not None)
        if code is not None:
            sys.exit(code)
    except BrokenPipeError:  # `lit-gpu env --json | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl+C outside a run (parsing, setup): nothing to save
        messages.tell(INTERRUPTED_OUTSIDE_RUN)
        sys.exit(INTERRUPT_EXIT_CODE)
    except Exception as err:
        message = _explain(err)
        if message is None:
            raise
        messages.tell_error(message)
        sys.exit(2)
