"""``weights_only: false`` is the switch that turns the weights-only checkpoint load off (a pickled checkpoint
then runs its code); it is honoured from the command line only, never from a file.

LightningCLI reads ``weights_only`` like any other key, from ``--config`` files too (Lightning 2.6,
``Trainer.fit(weights_only=...)``), so a downloaded config holding ``weights_only: false`` and
``ckpt_path: model.ckpt`` ran the code pickled in that checkpoint. The house rule: a file never switches a
safety setting; the one documented switch is ``--weights_only false`` typed on the command line
(docs/checkpoints.md). Settings handed over from Python (``LitGpuCLI(args={...})``, a notebook) are the
caller's own code and pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

FLAG = "--weights_only"
_CONFIG_FLAGS = ("--config", "-c")


def _last_position(argv: Sequence[str], flags: Sequence[str]) -> int:
    """Index of the last ``FLAG VALUE`` or ``FLAG=VALUE`` in ``argv`` for any of ``flags``; -1 if none."""
    found = -1
    for i, arg in enumerate(argv):
        if arg in flags or any(arg.startswith(flag + "=") for flag in flags):
            found = i
    return found


def typed_on_command_line(argv: Sequence[str]) -> bool:
    """Whether the last word on ``weights_only`` is the command line's ``--weights_only``: given, and no
    ``--config`` after it (a later config file would set it again)."""
    flag = _last_position(argv, (FLAG,))
    return flag >= 0 and _last_position(argv, _CONFIG_FLAGS) < flag


def check(config: Any, argv: Sequence[str], *, from_command_line: bool) -> None:
    """Refuse a ``weights_only: false`` that came from a config file (one line, exit 2; nothing loaded).

    Args:
        config: The parsed config (the subcommand's section holds ``weights_only``).
        argv: The command line as parsed.
        from_command_line: Whether the CLI parsed a command line (not settings given from Python).
    """
    if not from_command_line:
        return
    subcommand = config.get("subcommand") if hasattr(config, "get") else None
    section = config.get(subcommand) if subcommand else config
    if section is None or not hasattr(section, "get") or section.get("weights_only") is not False:
        return
    if typed_on_command_line(argv):
        return
    raise LitGpuError(messages.WEIGHTS_ONLY_FROM_A_FILE)


__all__ = ["check", "typed_on_command_line"]
