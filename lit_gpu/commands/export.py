"""``lit-gpu export CKPT --out model.pt|model.safetensors``: the plain net, loadable with torch alone.

Writes the net's ``state_dict`` (keys as in ``net.state_dict()``) and a JSON sidecar ``<out>.json``
with ``class_path`` and ``init_args`` (``.safetensors`` files carry the same in their metadata)::

    import importlib, json, torch
    meta = json.load(open("model.pt.json"))
    module, _, name = meta["class_path"].rpartition(".")
    net = getattr(importlib.import_module(module), name)(**meta["init_args"])
    net.load_state_dict(torch.load("model.pt", map_location="cpu", weights_only=True))

That recipe calls whatever the sidecar names: for files from elsewhere, build the net with
``lit_gpu.safe_build.build(meta)`` (checks the class first) or from your own code.
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
import yaml
from torch import nn

from lit_gpu import messages, safe_build
from lit_gpu.checkpoints import NET_SPEC_KEY, CheckpointMismatchError, clean_keys, load_into, read_checkpoint
from lit_gpu.errors import LitGpuError
from lit_gpu.io import atomic_torch_save, atomic_write

FORMATS = (".pt", ".pth", ".safetensors")


def _spec_from_run_config(ckpt_path: Path) -> tuple[dict[str, Any], str] | None:
    """``model.init_args.net`` from the ``config.yaml`` LightningCLI saved beside the run, and that file."""
    for config in (ckpt_path.parent.parent / "config.yaml", ckpt_path.parent / "config.yaml"):
        if not config.is_file():
            continue
        try:
            data = yaml.safe_load(config.read_text()) or {}
        except yaml.YAMLError as err:
            raise LitGpuError(
                f"{config} is not valid YAML ({messages.first_line(err)}); fix or remove it"
            ) from None
        model = data.get("model") if isinstance(data, dict) else None
        net = ((model if isinstance(model, dict) else {}).get("init_args") or {}).get("net")
        if isinstance(net, dict) and "class_path" in net:
            return {"class_path": net["class_path"], "init_args": net.get("init_args") or {}}, str(config)
    return None


def export_checkpoint(
    ckpt_path: str | os.PathLike,
    out: str | os.PathLike,
    trust: bool = False,
    trust_modules: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Export the net inside a lit_gpu checkpoint to ``out`` (``.pt``/``.pth`` or ``.safetensors``).

    The net spec comes from the checkpoint (lit_gpu modules store it) or the run's ``config.yaml``.
    The net is rebuilt from the spec with :func:`lit_gpu.safe_build.build` (only ``nn.Module`` classes
    from trusted or already-imported packages, checked before any call; ``trust_modules`` adds
    packages) and the weights loaded strictly before anything is written.

    Returns:
        ``(weights_path, sidecar_path)``.
    """
    ckpt_path, out = Path(ckpt_path), Path(out)
    if out.suffix not in FORMATS:
        raise LitGpuError(f"--out must end in {', '.join(FORMATS)}, got {out.name}")
    checkpoint = read_checkpoint(ckpt_path, trust=trust, opt_out="pass --trust (trust=True)")
    spec = checkpoint.get(NET_SPEC_KEY) if isinstance(checkpoint, dict) else None
    where = (str(ckpt_path), NET_SPEC_KEY)
    if not spec:
        spec, config = _spec_from_run_config(ckpt_path) or (None, "")
        where = (config, "model.init_args.net")
    if not spec:
        raise LitGpuError(
            f"{ckpt_path} does not say which net it holds (no {NET_SPEC_KEY!r} entry and no config.yaml "
            "beside the run); export checkpoints written by lit-gpu fit"
        )
    state_dict = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else checkpoint
    state_dict = clean_keys(state_dict)
    if any(k.startswith("net.") for k in state_dict):
        state_dict = {k[len("net.") :]: v for k, v in state_dict.items() if k.startswith("net.")}
    net = safe_build.build(spec, nn.Module, source=where[0], key=where[1], trust_modules=trust_modules)
    try:
        load_into(net, state_dict, strict=True)
    except CheckpointMismatchError as err:
        raise LitGpuError(f"exported net {spec['class_path']} does not match the checkpoint: {err}") from None
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
