"""Loading checkpoints saved anywhere into any module: :func:`load_into`, :func:`load_lightning_module`.

* Lightning ``.ckpt`` files, ``{"state_dict": ...}`` dicts, plain state_dicts, safetensors files;
* storages remapped with ``map_location`` (``"cpu"`` by default);
* ``module.`` (DP/DDP) and ``_orig_mod.`` (``torch.compile``) prefixes removed, ``net.`` fitted to the target;
* weights-only unless you pass ``trust=True`` for a file you trust;
* mismatches raise :class:`CheckpointMismatchError` listing missing, unexpected and mis-shaped keys.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from lit_gpu.checkpoints.build import MODEL_SPEC_KEY, NET_SPEC_KEY, net_spec
from lit_gpu.checkpoints.read import CheckpointError, check_checkpoint_file, read_checkpoint, read_into_memory
from lit_gpu.errors import LitGpuError
from lit_gpu.messages import shown as _shown

__all__ = [
    "CheckpointError",
    "CheckpointMismatchError",
    "LoadReport",
    "MODEL_SPEC_KEY",
    "NET_SPEC_KEY",
    "check_checkpoint_file",
    "clean_keys",
    "load_into",
    "load_lightning_module",
    "load_state_dict",
    "net_spec",
    "read_checkpoint",
]


# ---- load report --------------------------------------------------------------------------------
_MAX_LISTED = 3


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
    # keys come from the file: each one safe line (no escape sequences, no forged lines)
    listed = ", ".join(_shown(str(i), limit=120) for i in items[:_MAX_LISTED])
    return listed + (f", ... {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else "")


# ---- checkpoints --------------------------------------------------------------------------------
class CheckpointMismatchError(LitGpuError):
    """A checkpoint whose keys or shapes do not fit the target model."""


WRAPPER_PREFIXES = ("module.", "_orig_mod.")


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


#: wrappers nest a few deep in real checkpoints; more layers than this are left on the keys, which
#: keeps cleaning linear in the keys' length whatever a file holds
_MAX_WRAPPER_LAYERS = 16


def _unwrap(keys: list[str]) -> list[str]:
    keys = list(keys)
    changed, rounds = True, 0
    while changed and keys and rounds < _MAX_WRAPPER_LAYERS:
        changed, rounds = False, rounds + 1
        for wrapper in WRAPPER_PREFIXES:
            if all(k.startswith(wrapper) for k in keys):
                keys, changed = [k[len(wrapper) :] for k in keys], True
        groups: dict[str, list[int]] = {}  # "net." -> the positions of the keys under it (one pass)
        for i, k in enumerate(keys):
            if "." in k:
                groups.setdefault(k.split(".", 1)[0] + ".", []).append(i)
        for attr in sorted(groups):
            for wrapper in WRAPPER_PREFIXES:
                if all(keys[i].startswith(attr + wrapper) for i in groups[attr]):
                    cut = len(attr) + len(wrapper)
                    for i in groups[attr]:
                        keys[i] = attr + keys[i][cut:]
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
def _best_candidate(state_dict: dict[str, Any], target_keys: set[str]) -> dict[str, Any]:
    """The state_dict as is, with a shared first segment removed, or with a target prefix added:
    whichever matches most target keys (the first of equals, in that order). Linear in the keys."""
    best, score = state_dict, len(target_keys.intersection(state_dict))
    firsts = {k.split(".", 1)[0] for k in state_dict if "." in k}
    if len(firsts) == 1 and all("." in k for k in state_dict):
        stripped = clean_keys(state_dict, strip=[firsts.pop() + "."])
        if len(target_keys.intersection(stripped)) > score:
            best, score = stripped, len(target_keys.intersection(stripped))
    added: dict[str, int] = {}  # "net." -> target keys that are "net." + a state_dict key
    for key in target_keys:
        if "." in key:
            first, rest = key.split(".", 1)
            added[first + "."] = added.get(first + ".", 0) + (rest in state_dict)
    for prefix in sorted(added):
        if added[prefix] > score:
            best, score = {prefix + k: v for k, v in state_dict.items()}, added[prefix]
    return best


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
    best = _best_candidate(state_dict, target_keys)
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


# ---- describing nets ------------------------------------------------------------------------------


def load_lightning_module(
    cls: type,
    checkpoint_path: str | Path | IO,
    map_location: Any = None,
    hparams_file: str | Path | None = None,
    strict: bool | None = None,
    weights_only: bool | None = None,
    trust_modules: Iterable[str] = (),
    **kwargs: Any,
) -> Any:
    """``cls.load_from_checkpoint(...)`` for any ``LightningModule`` class, safe for files from elsewhere.

    Lightning rebuilds a CLI-written module by handing the checkpoint's hyper-parameters to jsonargparse,
    which imports and instantiates any ``class_path`` they name. Here they are first checked with the
    policy of :mod:`lit_gpu.checkpoints.build` (trusted packages only, classes of the right kind, plain data),
    and the file is read weights-only unless you pass ``weights_only=False`` (Lightning would default to
    ``False`` for ``http(s)://`` paths). Keyword arguments you pass replace the file's and are not checked.

    Args:
        cls: The ``LightningModule`` subclass to build (its own ``load_from_checkpoint`` is bypassed).
        trust_modules: Extra top-level packages whose classes the hyper-parameters may name.

    Raises:
        UnsafeBuildError: The hyper-parameters name something the policy refuses; nothing was built.
        CheckpointError: A pickle payload (without ``weights_only=False``) or an unreadable file.
    """
    import lightning.pytorch as pl

    from lit_gpu.checkpoints.build import check_hparams, is_true_subclass

    if not is_true_subclass(cls, pl.LightningModule):
        raise TypeError(f"{cls!r} is not a LightningModule class")
    weights_only = True if weights_only is None else weights_only
    if isinstance(checkpoint_path, str | os.PathLike) and os.path.isfile(checkpoint_path):
        # one read: the bytes checked are the bytes Lightning loads (a file replaced in between cannot
        # slip past the check)
        checkpoint_path = read_into_memory(checkpoint_path)
    check_hparams(
        cls,
        checkpoint_path,
        hparams_file=hparams_file,
        weights_only=weights_only,
        passed=kwargs,
        trust_modules=trust_modules,
    )
    original = vars(pl.LightningModule)["load_from_checkpoint"].__get__(None, cls)
    if isinstance(checkpoint_path, io.BytesIO):
        _no_larger_than_the_file(original, checkpoint_path, hparams_file, weights_only, kwargs)
    return original(checkpoint_path, map_location, hparams_file, strict, weights_only, **kwargs)


#: a module built from a file may hold this many bytes of weights per byte of the file (fp16 weights in a
#: float32 net: 2x; fp8: 4x), plus the slack: more, and what the file names is not the net it holds
NET_PER_FILE_BYTE = 4
NET_SLACK = 16 * 2**20


def unique_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the storages under ``tensors``, each storage counted once (a meta tensor by itself)."""
    seen: dict[Any, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            seen[storage.data_ptr() if t.device.type != "meta" else id(t)] = storage.nbytes()
    return sum(seen.values())


def larger_than(build: Any, held: int) -> tuple[nn.Module, int] | None:
    """``build()`` run on the meta device (no memory for its weights): the module and the bytes of its
    weights where they outweigh ``held`` file bytes past the allowance, else ``None``. A module that cannot
    be built on meta is left to the real build (``None``); a :class:`LitGpuError` propagates."""
    import warnings

    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe = build()
    except LitGpuError:
        raise
    except Exception:  # noqa: BLE001 - the real build reports it
        return None
    tensors = {id(t): t for t in probe.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)}
    needed = sum(t.numel() * t.element_size() for t in tensors.values())
    return (probe, needed) if needed > NET_PER_FILE_BYTE * held + NET_SLACK else None


def _no_larger_than_the_file(
    original: Any, data: io.BytesIO, hparams_file: Any, weights_only: bool, kwargs: dict[str, Any]
) -> None:
    """Hyper-parameters naming a net far larger than the file (``Linear(100000, 100000)`` in a 1 KB file)
    are refused before the real build allocates it."""
    size = len(data.getbuffer())
    try:
        found = larger_than(lambda: original(data, "meta", hparams_file, False, weights_only, **kwargs), size)
    finally:
        data.seek(0)
    if found is not None:
        raise CheckpointMismatchError(
            f"checkpoint {getattr(data, 'name', 'from a file object')}: its hyper-parameters build "
            f"{type(found[0]).__name__} with {found[1] / 2**20:.1f} MiB of weights but the file holds "
            f"{size / 2**20:.1f} MiB; it is not a checkpoint of that model; load a checkpoint written for it"
        )
