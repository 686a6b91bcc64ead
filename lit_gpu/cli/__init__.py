"""The ``lit-gpu`` command line: :func:`main` (entry point) and :class:`LitGpuCLI` (LightningCLI).

* :mod:`lit_gpu.cli.main`: the command table, ``--help``/``--version``, dispatch, error lines, exit codes.
* :mod:`lit_gpu.cli.lightning_cli`: LitGpuCLI, its parser, default callbacks and the extra arguments
  (``--fresh_optimizer``, the ``--weights_only`` switch, ``--predict_out``...).
* ``--ckpt_path last|best|FILE``: one call of :func:`lit_gpu.run.store.resolve_ckpt_path`.
* :mod:`lit_gpu.cli.run_folders`: the progress bar and monitor defaults (loggers: :mod:`lit_gpu.run`).
* :mod:`lit_gpu.cli.errors`: a user's mistake as one line: parse and build errors, a module without the
  step or the data a command needs, a seed Lightning would refuse deep inside a run.
* :mod:`lit_gpu.devices`: ``devices: free:N``, ``precision: auto``, device errors.
* :mod:`lit_gpu.cli.quiet`: the warning/logging filters ``main`` installs.
* :mod:`lit_gpu.cli.completion`: ``lit-gpu completion bash|zsh`` and the answers to each TAB.

``LitGpuCLI`` is imported on first use, so that ``lit-gpu --help`` does not build LightningCLI's machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lit_gpu.cli.main import check_package

check_package()  # a folder named lit_gpu in the working folder taken for the package: one clear line

from lit_gpu.cli.main import main  # noqa: E402

if TYPE_CHECKING:
    from lit_gpu.cli.lightning_cli import LitGpuCLI


def __getattr__(name: str) -> Any:
    if name == "LitGpuCLI":
        from lit_gpu.cli.lightning_cli import LitGpuCLI

        return LitGpuCLI
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LitGpuCLI", "main"]
