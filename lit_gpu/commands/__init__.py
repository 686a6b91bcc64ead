"""Tool commands of ``lit-gpu`` besides LightningCLI's fit/validate/test/predict.

Each command is a module here with ``main(argv) -> int``; :data:`COMMANDS` maps the sub-command name
to that function. A new command is one module plus one line below.
"""

from collections.abc import Callable, Sequence

from lit_gpu.commands import bench, configs, env, export, init, plot, sweep

Command = Callable[[Sequence[str]], int]

COMMANDS: dict[str, Command] = {
    "bench": bench.main,
    "configs": configs.main,
    "env": env.main,
    "export": export.main,
    "init": init.main,
    "plot": plot.main,
    "sweep": sweep.main,
}

__all__ = ["COMMANDS", "Command"]
