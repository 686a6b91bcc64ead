"""The ``lit-gpu`` command line: :func:`main` (entry point) and :class:`LitGpuCLI` (LightningCLI).

* :mod:`lit_gpu.cli.main`: dispatch to a tool command or LitGpuCLI, quieting, error lines, exit codes.
* :mod:`lit_gpu.cli.lightning_cli`: LitGpuCLI, its parser and the extra arguments.
* :mod:`lit_gpu.cli.ckpt_path`: ``--ckpt_path last`` / ``best`` (the newest run of the same model).
* :mod:`lit_gpu.cli.run_folders`: loggers under ``trainer.default_root_dir``, rebuild from a checkpoint.
* :mod:`lit_gpu.cli.trainer`: ``devices: free:N``, ``precision: auto``, device errors.
* :mod:`lit_gpu.cli.quiet`: the warning/logging filters ``main`` installs.
"""

from lit_gpu.cli.lightning_cli import LitGpuCLI
from lit_gpu.cli.main import main

__all__ = ["LitGpuCLI", "main"]
