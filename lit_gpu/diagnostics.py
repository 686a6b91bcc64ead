"""One-line errors for device requests the machine cannot meet (no GPU, too few GPUs).

Lightning raises ``MisconfigurationException`` with a message that names neither the config line that
asked for a GPU nor how to run on CPU. :func:`explain_device_error` (registered in
``lit_gpu.errors.TRANSLATORS``) rewrites it, naming the source found in the command line
(:func:`setting_source`): ``--trainer.accelerator gpu`` or ``configs/trainer/gpu.yaml``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from lit_gpu import errors

CPU_FIX = "to run on CPU use --config configs/trainer/cpu.yaml or --trainer.accelerator cpu"

_argv: list[str] = []


def record_argv(argv: Any) -> None:
    """Remember the CLI arguments so an error can say which of them asked for a device."""
    global _argv
    _argv = [str(a) for a in argv] if isinstance(argv, list | tuple) else []


def _yaml_lookup(path: str, dotted: str) -> Any:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def setting_source(key: str, argv: Sequence[str] | None = None) -> str | None:
    """Which argument set ``key`` (e.g. ``"trainer.accelerator"``) last, as the user would write it.

    Returns ``"--trainer.accelerator gpu"``, ``"configs/trainer/gpu.yaml (trainer.accelerator: gpu)"``
    or ``None`` when no argument mentions it.
    """
    args = list(_argv if argv is None else argv)
    flag = f"--{key}"
    found = None
    i = 0
    while i < len(args):
        arg = args[i]
        value: str | None = None
        if arg == flag or arg in ("--config", "-c"):
            value = args[i + 1] if i + 1 < len(args) else None
            i += 1
        elif arg.startswith(flag + "=") or arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        if value is not None:
            if arg.startswith(flag):
                found = f"{flag} {value}"
            else:
                setting = _yaml_lookup(value, key)
                if setting is not None:
                    found = f"{value} ({key}: {setting})"
        i += 1
    return found


def _why_no_gpu() -> str:
    import torch

    if torch.version.cuda is None:
        return " (this torch is a CPU-only build)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f" (CUDA_VISIBLE_DEVICES={visible!r} hides all GPUs)"
    return ""


_NO_GPU = (
    "No supported gpu backend found",
    "`CUDAAccelerator` can not run on your system",
    "GPUs requested but none are available",
)
_TOO_FEW = re.compile(r"You requested gpu: (\[.*?\])\s*But your machine only has: (\[.*?\])", re.S)


def explain_device_error(err: BaseException) -> str | None:
    """One line for Lightning's no-GPU / too-few-GPUs errors, else ``None``."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    if not isinstance(err, MisconfigurationException):
        return None
    message = str(err)
    if any(pattern in message for pattern in _NO_GPU):
        source = setting_source("trainer.accelerator")
        if "GPUs requested" in message:
            source = setting_source("trainer.devices") or source
        what = source or "the trainer settings"
        return (
            f"{what} asks for a GPU, but none is available{_why_no_gpu()}; {CPU_FIX} (details: lit-gpu env)"
        )
    match = _TOO_FEW.search(message)
    if match:
        requested, available = match.groups()
        count = len([x for x in available.strip("[]").split(",") if x.strip()])
        what = setting_source("trainer.devices") or "trainer.devices"
        return (
            f"{what} asks for GPUs {requested}, but only {count} {'is' if count == 1 else 'are'} visible "
            f"{available}; use --trainer.devices {count} (or 'free:N'), or {CPU_FIX}"
        )
    return None


_SPEC = f"{__name__}:explain_device_error"
if _SPEC not in errors.TRANSLATORS:
    errors.TRANSLATORS.append(_SPEC)
