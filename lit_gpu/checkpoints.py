"""Load checkpoints saved anywhere into any lit_gpu module or plain net.

* Lightning ``.ckpt`` files, ``{"state_dict": ...}``/``{"model_state_dict": ...}`` dicts, plain state_dicts,
  safetensors files, or a whole pickled ``nn.Module`` (only with ``trust=True``).
* Storages are remapped with ``map_location`` (``"cpu"`` by default), so a checkpoint written on a GPU
  loads on a CPU-only machine.
* Wrapper prefixes are stripped: ``module.`` (DataParallel / DDP) and ``_orig_mod.`` (``torch.compile``);
  the LightningModule attribute prefix (``net.``) is added or removed to fit the target.
* ``weights_only=True`` unless you pass ``trust=True`` for a file you trust.
* Mismatches raise :class:`CheckpointMismatchError` listing missing, unexpected and mis-shaped keys.
"""

from __future__ import annotations

import contextlib
import glob
import inspect
import io
import json
import os
import pickle
import time
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import first_line

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "LoadReport",
    "check_checkpoint_file",
    "clean_keys",
    "explain_choice",
    "find_last_checkpoint",
    "load_into",
    "load_state_dict",
    "net_spec",
    "read_checkpoint",
]

WRAPPER_PREFIXES = ("module.", "_orig_mod.")
NET_SPEC_KEY = "lit_gpu_net"
_MAX_LISTED = 3


class CheckpointError(LitGpuError):
    """A checkpoint file that cannot be read (missing, empty, truncated, corrupt, untrusted)."""


class CheckpointMismatchError(LitGpuError):
    """A checkpoint whose keys or shapes do not fit the target model."""


# ---- reading ------------------------------------------------------------------------------------
def _corrupt(path: Any, err: BaseException) -> CheckpointError:
    return CheckpointError(
        messages.CORRUPT_CHECKPOINT.format(what=f"checkpoint {path}", reason=first_line(err))
    )


def check_checkpoint_file(path: str | os.PathLike) -> Path:
    """Cheap sanity check of a checkpoint file without loading it (exists, non-empty, complete zip).

    Raises:
        CheckpointError: With a one-line reason.
    """
    path = Path(path)
    if path.is_dir():
        inside = sorted(path.rglob("*.ckpt"))
        example = f" (e.g. {inside[-1]})" if inside else ""
        raise CheckpointError(messages.CKPT_IS_DIRECTORY.format(path=path, example=example))
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes); a save was interrupted: use another one"
        )
    if path.suffix == ".safetensors":
        return path
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                archive.infolist()
        except (zipfile.BadZipFile, OSError) as err:
            raise _corrupt(path, err) from None
        return path
    with open(path, "rb") as f:
        head = f.read(2)
    if head[:1] != b"\x80":  # neither a zip (torch >= 1.6) nor a legacy pickle
        raise _corrupt(path, ValueError("not a torch checkpoint: no zip archive or pickle header"))
    return path


def read_checkpoint(
    path_or_obj: Any,
    map_location: Any = "cpu",
    weights_only: bool = True,
    trust: bool = False,
    *,
    opt_out: str = "pass trust=True",
) -> Any:
    """Read a checkpoint file (``torch.save`` format or ``.safetensors``) into Python objects.

    Args:
        path_or_obj: A path, a binary file object, or an already-loaded object (returned as is).
        map_location: Where storages go (``"cpu"``, ``"meta"``, a device, a dict or a function); a
            checkpoint written on ``cuda:0`` loads on a CPU-only machine with the default ``"cpu"``.
        weights_only: Refuse arbitrary pickled objects (safe for untrusted files).
        trust: Allow arbitrary pickles (sets ``weights_only=False``). Only for files you trust.
        opt_out: How the caller's user allows pickles, for the refusal message.

    Raises:
        CheckpointError: Missing, empty, corrupt or truncated file, or pickled objects without ``trust``.
    """
    if not isinstance(path_or_obj, str | os.PathLike | io.IOBase):
        return path_or_obj
    weights_only = weights_only and not trust
    if isinstance(path_or_obj, io.IOBase):
        return torch.load(path_or_obj, map_location=map_location, weights_only=weights_only)
    path = check_checkpoint_file(path_or_obj)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        device = map_location if isinstance(map_location, str) else "cpu"
        try:
            return load_file(str(path), device=device)
        except Exception as err:
            raise _corrupt(path, err) from None
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as err:
        if weights_only and "Weights only load failed" in str(err):
            message = messages.PICKLE_REFUSED.format(path=f"checkpoint {path}", opt_out=opt_out)
            raise CheckpointError(message) from None
        raise _corrupt(path, err) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as err:
        if "on a CUDA device" in str(err):  # a custom map_location that kept CUDA storages
            raise CheckpointError(messages.SAVED_ON_GPU.format(what=f"checkpoint {path}")) from None
        raise _corrupt(path, err) from None


def _extract_state_dict(obj: Any) -> dict[str, torch.Tensor]:
    if isinstance(obj, nn.Module):
        return obj.state_dict()
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model_state_dict", "model"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner:
                return _extract_state_dict(inner)
            if isinstance(inner, nn.Module):
                return inner.state_dict()
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if tensors and len(tensors) == len(obj):
            return dict(tensors)
    found = _listing(list(obj)) if isinstance(obj, Mapping) else type(obj).__name__
    raise CheckpointError(f"no state_dict found in the checkpoint (top level: {found})")


def clean_keys(state_dict: Mapping[str, Any], strip: Iterable[str] = ()) -> dict[str, Any]:
    """Remove wrapper prefixes from keys: ``module.`` (DP/DDP) and ``_orig_mod.`` (torch.compile).

    A wrapper prefix is removed when every key has it (``module.fc.weight``), or when every key under
    one attribute has it (``net._orig_mod.fc.weight`` -> ``net.fc.weight``), so a real submodule that
    happens to be called ``module`` is left alone. Each prefix in ``strip`` (e.g. ``"net."``) is
    removed from the front of the keys that have it.

    Args:
        state_dict: Mapping of parameter/buffer names to tensors.
        strip: Extra leading prefixes to remove, such as the LightningModule attribute ``"net."``.
    """
    keys = _unwrap(list(state_dict))
    for prefix in strip:
        keys = [k[len(prefix) :] if k.startswith(prefix) else k for k in keys]
    keys = _unwrap(keys)
    cleaned: dict[str, Any] = {}
    for new, value in zip(keys, state_dict.values(), strict=True):
        if new in cleaned:
            raise CheckpointMismatchError(f"two checkpoint keys map to {new!r} after removing prefixes")
        cleaned[new] = value
    return cleaned


def _unwrap(keys: list[str]) -> list[str]:
    changed = True
    while changed and keys:
        changed = False
        for wrapper in WRAPPER_PREFIXES:
            if all(k.startswith(wrapper) for k in keys):
                keys, changed = [k[len(wrapper) :] for k in keys], True
        for attr in sorted({k.split(".", 1)[0] + "." for k in keys if "." in k}):
            group = [k for k in keys if k.startswith(attr)]
            for wrapper in WRAPPER_PREFIXES:
                if all(k.startswith(attr + wrapper) for k in group):
                    cut = len(attr) + len(wrapper)
                    keys = [attr + k[cut:] if k.startswith(attr) else k for k in keys]
                    changed = True
                    break
    return keys


def load_state_dict(
    path_or_obj: Any,
    map_location: Any = "cpu",
    weights_only: bool = True,
    trust: bool = False,
) -> dict[str, torch.Tensor]:
    """The state_dict inside a checkpoint, with ``module.`` / ``_orig_mod.`` prefixes removed.

    The LightningModule attribute prefix (``net.``) is kept: :func:`load_into` fits it to the target.
    Arguments are those of :func:`read_checkpoint`; ``path_or_obj`` may also be a loaded dict/module.
    """
    return clean_keys(_extract_state_dict(read_checkpoint(path_or_obj, map_location, weights_only, trust)))


# ---- loading into a model -----------------------------------------------------------------------
@dataclass
class LoadReport:
    """What :func:`load_into` did."""

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shape_mismatches: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every key matched in name and shape."""
        return not (self.missing or self.unexpected or self.shape_mismatches)

    def summary(self) -> str:
        """One line: the counts and the first few keys of each kind of mismatch."""
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing ({_listing(self.missing)})")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected ({_listing(self.unexpected)})")
        if self.shape_mismatches:
            shapes = [
                f"{k}: checkpoint {tuple(a)} vs model {tuple(b)}"
                for k, (a, b) in self.shape_mismatches.items()
            ]
            parts.append(f"{len(shapes)} shape mismatch(es) ({_listing(shapes)})")
        return "; ".join(parts) if parts else f"all {len(self.loaded)} keys matched"


def _listing(items: list[str]) -> str:
    shown = ", ".join(str(i) for i in items[:_MAX_LISTED])
    return shown + (f", ... {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else "")


def _candidates(state_dict: dict[str, Any], target_keys: set[str]) -> list[dict[str, Any]]:
    """The state_dict as is, with a shared first segment removed, or with a target prefix added."""
    options = [state_dict]
    firsts = {k.split(".", 1)[0] for k in state_dict if "." in k}
    if len(firsts) == 1 and all("." in k for k in state_dict):
        options.append(clean_keys(state_dict, strip=[firsts.pop() + "."]))
    for prefix in sorted({k.split(".", 1)[0] + "." for k in target_keys if "." in k}):
        options.append({prefix + k: v for k, v in state_dict.items()})
    return options


def _report(state_dict: Mapping[str, torch.Tensor], target: nn.Module) -> LoadReport:
    own = target.state_dict()
    report = LoadReport()
    for key, value in state_dict.items():
        if key not in own:
            report.unexpected.append(key)
        elif hasattr(value, "shape") and tuple(value.shape) != tuple(own[key].shape):
            report.shape_mismatches[key] = (tuple(value.shape), tuple(own[key].shape))
        else:
            report.loaded.append(key)
    report.missing = [k for k in own if k not in state_dict]
    return report


def load_into(
    target: nn.Module,
    source: Any,
    strict: bool = True,
    map_location: Any = "cpu",
    weights_only: bool = True,
    trust: bool = False,
) -> LoadReport:
    """Load a checkpoint into ``target``: a lit_gpu ``LitModule``, any LightningModule or a plain net.

    Keys are aligned automatically: a Lightning checkpoint (``net.fc.weight``) loads into the plain
    net (``fc.weight``) and the other way round; DP/DDP and torch.compile prefixes are removed.

    Args:
        target: The module to fill in place.
        source: Checkpoint path, file object, loaded dict, state_dict or module.
        strict: Raise :class:`CheckpointMismatchError` on any missing, unexpected or mis-shaped key.
            With ``False``, load every key that fits and return the report.
        map_location: See :func:`read_checkpoint`.
        weights_only: See :func:`read_checkpoint`.
        trust: See :func:`read_checkpoint`.

    Returns:
        A :class:`LoadReport` of loaded / missing / unexpected / mis-shaped keys.
    """
    state_dict = load_state_dict(source, map_location, weights_only, trust)
    target_keys = set(target.state_dict())
    best = max(_candidates(state_dict, target_keys), key=lambda sd: len(target_keys & set(sd)))
    report = _report(best, target)
    if strict and not report.ok:
        name = source if isinstance(source, str | os.PathLike) else "the checkpoint"
        raise CheckpointMismatchError(
            f"{name} does not fit {type(target).__name__}: {report.summary()}; is it a checkpoint of "
            "another model or config? (pass strict=False to load the matching keys only)"
        )
    fitting = {k: best[k] for k in report.loaded}
    target.load_state_dict(fitting, strict=False)
    return report


# ---- finding checkpoints and describing nets ------------------------------------------------------
def find_last_checkpoint(patterns: Iterable[str | os.PathLike], prefix: str = "last") -> Path | None:
    """Newest (by modification time) ``{prefix}*.ckpt`` in folders matching any glob pattern."""
    found: list[Path] = []
    for pattern in patterns:
        for folder in glob.glob(str(pattern)):
            matches = Path(folder).glob(f"{prefix}*.ckpt")
            found.extend(p for p in matches if p.is_file() and p.stat().st_size > 0)
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _run_folders(pattern: str | os.PathLike) -> list[Path]:
    """Run folders of a checkpoint-folder glob: ``runs/x/version_*/checkpoints`` -> ``runs/x/version_*``."""
    pattern = Path(pattern)
    if pattern.name == "checkpoints" and glob.has_magic(str(pattern.parent)):
        return [Path(p) for p in glob.glob(str(pattern.parent)) if Path(p).is_dir()]
    return []


def explain_choice(
    chosen: str | os.PathLike, patterns: Iterable[str | os.PathLike], prefix: str = "last"
) -> str:
    """Why :func:`find_last_checkpoint` chose ``chosen``: its step and time, and the newer runs it skipped.

    E.g. ``"step 120, epoch 2, written 2026-11-22 08:10:02; the newest last*.ckpt in
    runs/lit_gpu/version_*/checkpoints; skipped newer version_4: no last*.ckpt yet"``.
    """
    chosen = Path(chosen)
    mtime = chosen.stat().st_mtime
    facts = []
    with contextlib.suppress(Exception):  # mmap: reads the small pickle, not the tensors
        header = torch.load(chosen, map_location="cpu", weights_only=True, mmap=True)
        if isinstance(header, Mapping) and "global_step" in header:
            facts.append(f"step {header['global_step']}, epoch {header.get('epoch')}")
    facts.append("written " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime)))
    patterns = [str(p) for p in patterns]
    why = messages.CHECKPOINT_CHOICE.format(
        facts="; ".join(facts), prefix=prefix, where=" or ".join(patterns)
    )
    skipped = []
    for pattern in patterns:
        for run in _run_folders(pattern):
            if run == chosen.parent.parent or run.stat().st_mtime <= mtime:
                continue
            if not any(p.stat().st_size > 0 for p in (run / "checkpoints").glob(f"{prefix}*.ckpt")):
                skipped.append(run)
    if skipped:
        names = ", ".join(r.name for r in sorted(skipped, key=lambda r: (r.stat().st_mtime, r.name))[-3:])
        why += "; " + messages.SKIPPED_NEWER_RUNS.format(names=names, prefix=prefix)
    return why


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def net_spec(net: nn.Module) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` that rebuild ``net``: the CLI config when LightningCLI built it.

    Outside the CLI, init args are read from same-named attributes of ``net`` when they exist (others
    keep their defaults); exporters verify the rebuilt net's keys and shapes before writing.
    """
    # private, pinned in tests/unit/test_upstream_pins.py: the CLI config of the module being built
    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters

    class_path = f"{type(net).__module__}.{type(net).__qualname__}"
    given = _given_hyperparameters.get()
    config = given.get("net") if isinstance(given, Mapping) else None
    if (
        isinstance(config, Mapping)
        and str(config.get("class_path", "")).rsplit(".", 1)[-1] == type(net).__name__
    ):
        init_args = dict(config.get("init_args") or {})
        if _jsonable(init_args):
            return {"class_path": config["class_path"], "init_args": init_args}
    init_args = {}
    for name, param in inspect.signature(type(net).__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        value = getattr(net, name, None)
        if value is not None and not isinstance(value, nn.Module) and _jsonable(value):
            init_args[name] = value
    return {"class_path": class_path, "init_args": init_args}
