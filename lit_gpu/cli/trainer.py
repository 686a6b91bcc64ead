"""The ``trainer`` part of a parsed config: ``free:N`` / ``precision: auto`` resolution, device errors.

Lightning raises ``MisconfigurationException`` for a GPU request the machine cannot meet, naming neither
the config line that asked for it nor how to run on CPU. :func:`explain_device_error` rewrites it with
the source found in the command line the CLI was given (:func:`setting_source`):
``--trainer.accelerator gpu`` or ``configs/trainer/gpu.yaml (trainer.accelerator: gpu)``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any, Literal

from lit_gpu import messages, visible_devices
from lit_gpu.devices import auto_precision
from lit_gpu.files.text import BadFileError, read_yaml
from lit_gpu.free_gpus import FreeChoice, claim_free_gpus, parse_free_request
from lit_gpu.upstream.tools import widen_type


# ---- resolution before the Trainer is built ------------------------------------------------------
def allow_auto_precision(parser: Any) -> None:
    """Let ``--trainer.precision`` accept ``auto`` (the Trainer itself does not; the CLI resolves it).

    jsonargparse offers no public way to widen the type of an argument added from a signature, so
    this edits the action's type hint (:func:`lit_gpu.upstream.tools.widen_type`, pinned).
    """
    widen_type(parser, "trainer.precision", lambda typehint: typehint | Literal["auto"] | None)


def resolve_trainer_config(trainer: Any) -> FreeChoice | None:
    """Rewrite ``devices: "free:N"`` and ``precision: auto`` in a parsed ``trainer`` config, in place.

    ``free:N`` is decided once per job and handed down to the ranks
    (:func:`~lit_gpu.free_gpus.claim_free_gpus`); the deciding process says which GPUs it chose.
    Returns that choice, or ``None`` without ``free:N``.
    """
    devices = trainer.get("devices", "auto")
    choice = None
    n = parse_free_request(devices)
    if n is not None:
        choice = claim_free_gpus(n)
        trainer["devices"] = devices = choice.devices
        if choice.decided_here:  # one deciding process per node: every node logs its own choice
            print(messages.PREFIX + messages.one_line(choice.describe()), file=sys.stderr, flush=True)
    precision = trainer.get("precision")
    if isinstance(precision, str) and precision.strip().lower() == "auto":
        trainer["precision"] = auto_precision(trainer.get("accelerator", "auto"), devices)
    return choice


# ---- device errors ------------------------------------------------------------------------------
def as_argv(args: Any) -> list[str]:
    """The command-line list the CLI was given (``[]`` for a dict or Namespace of settings)."""
    return [str(a) for a in args] if isinstance(args, list | tuple) else []


def _yaml_lookup(path: str, dotted: str) -> Any:
    try:
        data = read_yaml(path)
    except (OSError, BadFileError):
        return None
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def setting_source(key: str, argv: Sequence[str]) -> str | None:
    """Which argument set ``key`` (e.g. ``"trainer.accelerator"``) last, as the user would write it.

    Returns ``"--trainer.accelerator gpu"``, ``"configs/trainer/gpu.yaml (trainer.accelerator: gpu)"``
    or ``None`` when no argument mentions it.
    """
    args = list(argv)
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
    if visible_devices.hides_all(visible):  # read as CUDA reads it: "", "-1", "NoDevFiles", "0,0"
        return f" (CUDA_VISIBLE_DEVICES={visible!r} hides all GPUs)"
    return ""


_NO_GPU = (
    "No supported gpu backend found",
    "`CUDAAccelerator` can not run on your system",
    "GPUs requested but none are available",
)
_TOO_FEW = re.compile(r"You requested gpu: (\[.*?\])\s*But your machine only has: (\[.*?\])", re.S)


def explain_device_error(err: BaseException, argv: Sequence[str]) -> str | None:
    """One line for Lightning's no-GPU / too-few-GPUs errors, naming the setting in ``argv``, or None."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    if not isinstance(err, MisconfigurationException):
        return None
    message = str(err)
    if any(pattern in message for pattern in _NO_GPU):
        source = setting_source("trainer.accelerator", argv)
        if "GPUs requested" in message:
            source = setting_source("trainer.devices", argv) or source
        return messages.NO_GPU.format(source=source or "the trainer settings", why=_why_no_gpu())
    match = _TOO_FEW.search(message)
    if match:
        requested, available = match.groups()
        count = len([x for x in available.strip("[]").split(",") if x.strip()])
        return messages.TOO_FEW_GPUS.format(
            source=setting_source("trainer.devices", argv) or "trainer.devices",
            requested=requested,
            count=count,
            verb="is" if count == 1 else "are",
            available=available,
        )
    return None


# ---- other invalid trainer settings -------------------------------------------------------------
_NAMED = re.compile(r"`(?:Trainer\()?(\w+)")
_JOINED = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)+")  # limit_train_batches: never an ordinary word


def _trainer_params() -> set[str]:
    import inspect

    import lightning.pytorch as pl

    return set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}


def explain_trainer_error(err: BaseException, argv: Sequence[str]) -> str | None:
    """One line for an invalid ``trainer`` setting the Trainer refused while being built, or None.

    Lightning's ``MisconfigurationException`` always; a ``ValueError``/``ImportError`` only when it names a
    Trainer argument (``strategy='ddpp'``) or a missing optional requirement (``torch_xla`` for ``tpu``).
    The setting's source in ``argv`` is named when found.
    """
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    device = explain_device_error(err, argv)
    if device is not None:
        return device
    if not isinstance(err, MisconfigurationException | ValueError | TypeError | ImportError):
        return None
    reason = messages.first_line(err).rstrip(".")
    params = _trainer_params()
    named = [n for n in _NAMED.findall(reason) if n in params]
    named += [p for p in sorted(params) if re.search(rf"\b{p}=", reason) and p not in named]
    # Lightning's _determine_batch_limits names a setting bare ("invalid value nan for limit_train_batches"):
    # a Trainer argument with an underscore is never an ordinary word
    bare = [p for p in sorted(params) if _JOINED.fullmatch(p) and re.search(rf"\b{p}\b", reason)]
    named += [p for p in bare if p not in named]
    requirement = "Requirement '" in reason
    if not isinstance(err, MisconfigurationException) and not named and not requirement:
        return None
    keys = named or ["accelerator", "strategy", "precision", "plugins"]
    sources = [setting_source(f"trainer.{key}", argv) for key in keys]
    source = next((s for s in sources if s), f"trainer.{named[0]}" if named else "the trainer settings")
    return messages.BAD_TRAINER_SETTING.format(source=source, reason=reason)
