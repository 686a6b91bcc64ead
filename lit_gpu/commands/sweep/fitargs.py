"""The trials' ``fit`` arguments: checked once up front, and how parameters are named on screen."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typing_extensions import override

from lit_gpu import messages
from lit_gpu.commands.sweep.space import SearchSpace
from lit_gpu.errors import LitGpuError


class _Parsed(Exception):
    def __init__(self, config: Any) -> None:
        self.config = config


def parse_fit_args(args: list[str]) -> Any:
    """Parse ``fit`` arguments without building anything; returns the ``fit`` config.

    A wrong key or value ends here with the CLI's one-line ``lit-gpu: error:`` and exit status 2.
    """
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    class CheckCLI(LitGpuCLI):
        @override
        def _lit_gpu_before_instantiate(self) -> None:  # parsed and checked; no GPU claimed for a check
            raise _Parsed(self.config)

    try:
        CheckCLI(args=args)
    except _Parsed as parsed:
        return parsed.config["fit"]
    raise AssertionError("LitGpuCLI returned without parsing")  # pragma: no cover


def _flat_keys(config: Any, prefix: str = "") -> list[str]:
    keys = []
    for key, value in config.items() if hasattr(config, "items") else []:
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        if hasattr(value, "items"):
            keys += _flat_keys(value, dotted + ".")
    return keys


def check_space_keys(space: SearchSpace, config: Any) -> None:
    """Every key of the search space must name a setting of the parsed ``fit`` config."""
    known = set(_flat_keys(config.as_dict() if hasattr(config, "as_dict") else config))
    for key in [p.key for p in space.params] + list(space.fixed):
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "see lit-gpu fit --print_config for the keys"
            raise LitGpuError(messages.SWEEP_UNKNOWN_KEY.format(path=space.path, key=key, hint=hint))


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Shortest unambiguous dotted suffix of each key (``...optimizer.init_args.lr`` -> ``lr``)."""
    names: dict[str, str] = {}
    for key in keys:
        parts = [p for p in key.split(".") if p != "init_args"]
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            others = [k for k in keys if k != key]
            if not any(".".join([p for p in k.split(".") if p != "init_args"][-n:]) == name for k in others):
                break
        names[key] = name
    return names


def fmt(value: Any) -> str:
    """A value as the sweep prints it (floats to 4 significant digits)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def logger_flag(sweep_dir: Path, version: int) -> str:
    """``--trainer.logger=...``: a CSVLogger writing to ``<sweep_dir>/version_<version>``."""
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(sweep_dir.parent), "name": sweep_dir.name, "version": version},
    }
    return f"--trainer.logger={json.dumps(logger)}"
