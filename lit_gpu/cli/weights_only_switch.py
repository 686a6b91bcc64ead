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
from lit_gpu.files.text import BadFileError, read_yaml

FLAG = "--weights_only"
_CONFIG_FLAGS = ("--config", "-c")


def _last_position(argv: Sequence[str], flags: Sequence[str]) -> int:
    """Index of the last ``FLAG VALUE`` or ``FLAG=VALUE`` in ``argv`` for any of ``flags``; -1 if none."""
    found = -1
    for i, arg in enumerate(argv):
        if arg in flags or any(arg.startswith(flag + "=") for flag in flags):
            found = i
    return found


def _configs_after(argv: Sequence[str]) -> list[str]:
    """The paths of the ``--config``/``-c`` files in ``argv``, in order."""
    paths = []
    for i, arg in enumerate(argv):
        flag, equals, value = arg.partition("=")
        if flag in _CONFIG_FLAGS and equals:
            paths.append(value)
        elif arg in _CONFIG_FLAGS and i + 1 < len(argv):
            paths.append(argv[i + 1])
    return paths


def _sets_weights_only(path: str) -> bool:
    """Whether the config file at ``path`` holds ``weights_only`` (at its top or in a subcommand's section);
    a file that cannot be read counts as holding it (its parse fails later, with its own line)."""
    try:
        data = read_yaml(path)
    except (OSError, BadFileError):
        return True
    if not isinstance(data, dict):
        return False
    sections = [data, *(value for value in data.values() if isinstance(value, dict))]
    return any("weights_only" in section for section in sections)


def typed_on_command_line(argv: Sequence[str]) -> bool:
    """Whether the last word on ``weights_only`` is the command line's ``--weights_only``: given, and no
    ``--config`` after it that sets it again (as jsonargparse reads them: a later file sets only its keys)."""
    flag = _last_position(argv, (FLAG,))
    return flag >= 0 and not any(_sets_weights_only(path) for path in _configs_after(argv[flag + 1 :]))


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
