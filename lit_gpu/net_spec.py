"""The ``{"class_path", "init_args"}`` that rebuilds a net: recorded in checkpoints for ``lit-gpu export``."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from torch import nn

NET_SPEC_KEY = "lit_gpu_net"
MODEL_SPEC_KEY = "lit_gpu_model"


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
    from lit_gpu.upstream import given_hyperparameters  # the CLI config of the module being built

    class_path = f"{type(net).__module__}.{type(net).__qualname__}"
    given = given_hyperparameters()
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


def plain_spec(config: Any) -> dict[str, Any] | None:
    """``{"class_path", "init_args"}`` of a config entry (a Namespace or dict) as JSON-able plain data.

    Init args that are not plain data (already-built objects) are left out; ``None`` when the entry
    names no class.
    """
    if hasattr(config, "as_dict"):
        config = config.as_dict()
    if not isinstance(config, Mapping) or not isinstance(config.get("class_path"), str):
        return None
    args = config.get("init_args")
    args = args.as_dict() if hasattr(args, "as_dict") else args
    init_args = {}
    for name, value in (args or {}).items() if isinstance(args, Mapping) else ():
        value = value.as_dict() if hasattr(value, "as_dict") else value
        if _jsonable(value):
            init_args[str(name)] = value
    return {"class_path": config["class_path"], "init_args": init_args}
