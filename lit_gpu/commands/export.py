"""``lit-gpu export CKPT --out model.pt|model.safetensors``: the plain net, loadable with torch alone.

Writes the net's ``state_dict`` (keys as in ``net.state_dict()``) and a JSON sidecar ``<out>.json``
with ``class_path`` and ``init_args`` (``.safetensors`` files carry the same in their metadata)::

    import importlib, json, torch
    meta = json.load(open("model.pt.json"))
    module, _, name = meta["class_path"].rpartition(".")
    net = getattr(importlib.import_module(module), name)(**meta["init_args"])
    net.load_state_dict(torch.load("model.pt", map_location="cpu", weights_only=True))

That recipe calls whatever the sidecar names: for files from elsewhere, build the net with
``lit_gpu.checkpoints.build.build(meta)`` (checks the class first) or from your own code.

Any LightningModule run by ``lit-gpu fit`` can be exported: the CLI records the model's config in every
checkpoint (``lit_gpu_model``); a module with a ``net`` exports the net, any other the whole module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lit_gpu import messages
from lit_gpu.checkpoints import CheckpointMismatchError, clean_keys, load_into
from lit_gpu.checkpoints import build as safe_build
from lit_gpu.checkpoints.build import MODEL_SPEC_KEY, NET_SPEC_KEY
from lit_gpu.checkpoints.io import atomic_torch_save, atomic_write
from lit_gpu.checkpoints.load import larger_than, unique_bytes
from lit_gpu.checkpoints.read import read_checkpoint
from lit_gpu.errors import LitGpuError
from lit_gpu.run.store import config_of_checkpoint, rebuild_fields

FORMATS = (".pt", ".pth", ".safetensors")


def _net_of(model: Any) -> dict[str, Any] | None:
    net = (model.get("init_args") or {}).get("net") if isinstance(model, dict) else None
    if isinstance(net, dict) and isinstance(net.get("class_path"), str):
        return {"class_path": net["class_path"], "init_args": net.get("init_args") or {}}
    return None


def _spec(checkpoint: Any, ckpt_path: Path, trust_modules: Sequence[str]) -> tuple[Any, str, str, bool]:
    """The net spec (or the whole module's), where it came from, and whether it is the whole module."""
    stored = checkpoint if isinstance(checkpoint, dict) else {}
    if stored.get(NET_SPEC_KEY):
        return stored[NET_SPEC_KEY], str(ckpt_path), NET_SPEC_KEY, False
    model = stored.get(MODEL_SPEC_KEY)
    if isinstance(model, dict) and model.get("class_path"):
        net = _net_of(model)
        if net is not None:
            return net, str(ckpt_path), f"{MODEL_SPEC_KEY}.init_args.net", False
        return model, str(ckpt_path), MODEL_SPEC_KEY, True
    config = config_of_checkpoint(ckpt_path)
    if config is not None:
        fields = rebuild_fields(config, trust_modules)  # the model only, checked; nothing else is read
        net = _net_of(fields.model)
        if net is not None:
            return net, str(config), "model.init_args.net", False
        return fields.model, str(config), "model", True
    return None, "", "", False


def _no_larger_than_the_file(
    spec: dict[str, Any], state_dict: Any, source: str, key: str, trust_modules: Sequence[str]
) -> None:
    """A spec naming a net far larger than the file's weights is refused before it is built for real."""
    held = unique_bytes(state_dict.values()) if isinstance(state_dict, dict) else 0
    build = lambda: safe_build.build(spec, nn.Module, source=source, key=key, trust_modules=trust_modules)  # noqa: E731
    found = larger_than(build, held)
    if found is not None:
        raise LitGpuError(
            f"{source}: {key} builds {messages.shown(spec.get('class_path'))} with "
            f"{found[1] / 2**20:.1f} MiB of weights but the checkpoint holds {held / 2**20:.1f} MiB; it is "
            "not the net these weights belong to; export a checkpoint written by lit-gpu fit of that net"
        )


def export_checkpoint(
    ckpt_path: str | os.PathLike,
    out: str | os.PathLike,
    trust: bool = False,
    trust_modules: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Export the net inside a lit_gpu checkpoint to ``out`` (``.pt``/``.pth`` or ``.safetensors``).

    The net spec comes from the checkpoint (the CLI records the model's config; lit_gpu modules their
    net) or the model of the run's ``version_N/config.yaml``; a module without a ``net`` is exported
    whole. It is rebuilt with :func:`lit_gpu.checkpoints.build.build` (only ``nn.Module`` classes from
    trusted packages, checked before any call; ``trust_modules`` adds packages) and the weights loaded
    strictly before anything is written.

    Returns:
        ``(weights_path, sidecar_path)``.
    """
    ckpt_path, out = Path(ckpt_path), Path(out)
    if out.suffix not in FORMATS:
        raise LitGpuError(f"--out must end in {', '.join(FORMATS)}, got {out.name}")
    checkpoint = read_checkpoint(ckpt_path, trust=trust, opt_out="pass --trust (trust=True)")
    spec, source, key, whole = _spec(checkpoint, ckpt_path, trust_modules)
    if not isinstance(spec, dict) or not spec:
        raise LitGpuError(
            f"{ckpt_path} does not say which net it holds (no {NET_SPEC_KEY!r} or {MODEL_SPEC_KEY!r} entry "
            "and no run config.yaml in its version_N folder); export checkpoints written by lit-gpu fit"
        )
    state_dict = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else checkpoint
    state_dict = clean_keys(state_dict)
    if not whole and any(k.startswith("net.") for k in state_dict):
        state_dict = {k[len("net.") :]: v for k, v in state_dict.items() if k.startswith("net.")}
    _no_larger_than_the_file(spec, state_dict, source, key, trust_modules)
    net = safe_build.build(spec, nn.Module, source=source, key=key, trust_modules=trust_modules)
    try:
        load_into(net, state_dict, strict=True)
    except CheckpointMismatchError as err:
        raise LitGpuError(
            f"exported net {messages.shown(spec['class_path'])} does not match the checkpoint: {err}"
        ) from None
    weights = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    spec = {"class_path": spec["class_path"], "init_args": dict(spec.get("init_args") or {})}
    meta = {
        "class_path": spec["class_path"],
        "init_args": spec["init_args"],
        "format": "safetensors" if out.suffix == ".safetensors" else "torch",
        "source_checkpoint": str(ckpt_path),
        "torch_version": torch.__version__,
    }
    if out.suffix == ".safetensors":
        from safetensors.torch import save

        header = {"class_path": spec["class_path"], "init_args": json.dumps(spec["init_args"])}
        blob = save({k: v.clone() for k, v in weights.items()}, metadata=header)
        atomic_write(out, lambda f: f.write(blob))
    else:
        atomic_torch_save(weights, out)
    sidecar = out.with_name(out.name + ".json")
    atomic_write(sidecar, lambda f: f.write((json.dumps(meta, indent=2) + "\n").encode()))
    return out, sidecar


def main(argv: Sequence[str]) -> int:
    """``lit-gpu export CKPT --out model.pt|model.safetensors [--trust]``."""
    parser = argparse.ArgumentParser(
        prog="lit-gpu export",
        allow_abbrev=False,
        description="Write the plain net's weights (+ class path and init args) from a lit_gpu checkpoint.",
    )
    parser.add_argument("checkpoint", help="a .ckpt written by lit-gpu fit")
    parser.add_argument("--out", required=True, help="model.pt, model.pth or model.safetensors")
    parser.add_argument("--trust", action="store_true", help="allow pickled objects (trusted files only)")
    parser.add_argument(
        "--trust_module",
        action="append",
        default=[],
        metavar="PACKAGE",
        help="a top-level package (yours) whose net classes may be imported (repeatable; also "
        f"${safe_build.TRUST_ENV}=pkg1,pkg2); lit_gpu, torch, torchvision and lightning always may",
    )
    args = parser.parse_args(list(argv))
    weights, sidecar = export_checkpoint(
        args.checkpoint, args.out, trust=args.trust, trust_modules=args.trust_module
    )
    messages.tell(messages.EXPORTED.format(weights=weights, sidecar=sidecar), stream=sys.stdout)
    return 0
