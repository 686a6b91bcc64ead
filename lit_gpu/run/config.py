"""A run's saved ``config.yaml``: found only in the run's own folder, read as plain data, used for fields.

(A continued run keeps it and saves a changed config beside it: :func:`config_changes`,
:func:`next_config_path`, used by :class:`lit_gpu.run.config_saver.RunConfigSaver`.)

LightningCLI saves the whole config of a run (``ROOT/NAME/version_N/config.yaml``). Someone else's run
folder is data, so only two things are ever taken from it:

* :func:`run_signature`: which model and data classes it names (``class_path`` strings, compared, never
  imported), to match ``--ckpt_path last|best`` with earlier runs;
* :func:`rebuild_fields`: the ``model`` and ``data`` entries (class paths and init args, checked by
  :func:`lit_gpu.checkpoints.build.check` as jsonargparse would load them) to rebuild a run from a checkpoint
  alone. Never safety switches (``weights_only``), ``ckpt_path``, trainer settings (loggers, callbacks,
  plugins, strategies, ``default_root_dir``), ``predict_out`` or other paths: init args that name files
  or folders (by name or by value) and ``download`` are left out and listed.

:func:`config_of_checkpoint` looks only in ``version_N/`` for ``version_N/checkpoints/X.ckpt``, never in
a shared parent folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.files.text import BadFileError, read_yaml
from lit_gpu.run.class_paths import current
from lit_gpu.run.layout import CONFIG_N_RE, CONFIG_NAME, run_of_checkpoint

__all__ = [
    "CONFIG_NAME",
    "RebuildFields",
    "Signature",
    "config_changes",
    "config_of_checkpoint",
    "next_config_path",
    "read_plain",
    "rebuild_fields",
    "run_signature",
    "saved_configs",
]

_SKIPPED_KEYS = re.compile(r"optim|sched", re.IGNORECASE)  # not part of "which model" for matching
# init args that name files, folders or the network: a file must not choose where a run reads or writes
_PATH_NAMES = re.compile(
    r"^(.*_)?(dir|dirs|dirpath|path|paths|file|files|filename|filepath|root|output|url|uri|download)$",
    re.IGNORECASE,
)
_MAX_BYTES = 1 << 20  # a config.yaml is a few KB; a bigger one is not a run's


# ---- which model a config describes ---------------------------------------------------------------
_MAX_WALK = 2_000_000  # containers one signature walk visits at most


def _class_paths(node: Any, skip_key: str = "") -> list[str]:
    """Every ``class_path`` in a config tree, depth first, leaving out optimizer/scheduler subtrees.

    Iterative (a walk over data never recurses on its shape) and bounded: a tree from
    :func:`~lit_gpu.files.text.read_yaml` is acyclic and expands to at most ``max_nodes`` values (a node
    shared by aliases is walked each time, as it expands); a container met again inside itself (a cycle,
    which no reader makes) is not walked again; past :data:`_MAX_WALK` containers the walk stops.
    """
    found: list[str] = []
    stack: list[tuple[Any, str, bool]] = [(node, skip_key, False)]
    inside: set[int] = set()  # the containers being walked: the current one and its ancestors
    walked = 0
    while stack and walked < _MAX_WALK:
        item, key, leaving = stack.pop()
        if leaving:
            inside.discard(id(item))
            continue
        if key and _SKIPPED_KEYS.search(key):
            continue
        if not isinstance(item, Mapping | list | tuple) or id(item) in inside:
            continue
        walked += 1
        inside.add(id(item))
        stack.append((item, key, True))
        if isinstance(item, Mapping):
            if isinstance(item.get("class_path"), str):
                found.append(item["class_path"])
            children = [(value, str(k), False) for k, value in item.items() if k != "class_path"]
        else:
            children = [(value, key, False) for value in item]
        stack.extend(reversed(children))
    return found


@dataclass(frozen=True)
class Signature:
    """Which model (module and its nets) and which data module a config builds."""

    model: tuple[str, ...]
    data: str | None

    @classmethod
    def of(cls, config: Mapping[str, Any] | None) -> Signature:
        """From a config mapping with ``model`` / ``data`` entries (a parsed or a saved config)."""
        config = config or {}
        data = config.get("data")
        data_class = data.get("class_path") if isinstance(data, Mapping) else None
        return cls(
            tuple(_class_paths(config.get("model"))), data_class if isinstance(data_class, str) else None
        )

    @classmethod
    def of_parsed(cls, config: Any) -> Signature:
        """From a sub-command's parsed config (Namespaces or dicts): its ``model`` and ``data``."""

        def plain(key: str) -> Any:
            try:
                node = config[key]
            except (KeyError, TypeError, AttributeError):
                return None
            return node.as_dict() if hasattr(node, "as_dict") else node

        return cls.of({"model": plain("model"), "data": plain("data")})

    def matches(self, other: Signature) -> bool:
        """Same model classes, and same data class when both name one."""
        if not self.model or self.model != other.model:
            return False
        return self.data is None or other.data is None or self.data == other.data

    def describe(self) -> str:
        """``RegressionModule(SimpleModel) + SyntheticRegressionDataModule``."""
        if not self.model:
            return "unknown model"
        names = [p.rsplit(".", 1)[-1][:60] for p in self.model]
        text = names[0] + (f"({', '.join(names[1:])})" if len(names) > 1 else "")
        return text + (f" + {self.data.rsplit('.', 1)[-1][:60]}" if self.data else "")


def _read(path: Path) -> dict[str, Any] | None:
    """``path`` as plain data (``yaml.safe_load``: no tags, no objects), or ``None`` if unreadable."""
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return None
        data = read_yaml(path)  # lit_gpu.files.text: budgeted plain YAML
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError, BadFileError):
        return None
    return current(data) if isinstance(data, dict) else None  # classes that moved: their public names


def read_plain(path: str | os.PathLike) -> dict[str, Any] | None:
    """A run's saved config file as plain data (mappings, lists, scalars), or ``None`` if unreadable."""
    return _read(Path(path))


def run_signature(folder: str | os.PathLike) -> Signature | None:
    """The model/data classes named by the ``config.yaml`` of a ``version_N`` folder, or ``None`` (also for a
    ``config.yaml`` that is a link, as :func:`config_of_checkpoint` passes links over: lit_gpu writes none,
    and a run is chosen by its own files only)."""
    path = Path(folder) / CONFIG_NAME
    saved = None if path.is_symlink() else _read(path)
    return Signature.of(saved) if saved is not None else None


# ---- the config of a checkpoint's run ---------------------------------------------------------------
def config_of_checkpoint(ckpt_path: str | os.PathLike) -> Path | None:
    """``version_N/config.yaml`` for ``.../version_N/checkpoints/X.ckpt``, else ``None``.

    Only that layout: a checkpoint elsewhere (``DIR/sub/model.ckpt``) has no run config, whatever
    ``config.yaml`` lies in a parent folder. The checkpoint must really be in that run folder.
    """
    ckpt = Path(ckpt_path).absolute()
    found = run_of_checkpoint(ckpt)
    if found is None:
        return None
    from lit_gpu.checkpoints.contracts import inside

    if not inside(ckpt, found.path):
        return None
    saved = [p for p in saved_configs(found.path) if not p.is_symlink()]
    return saved[-1] if saved and saved[0].name == CONFIG_NAME else None  # the newest one ran last


def saved_configs(folder: str | os.PathLike) -> list[Path]:
    """``config.yaml`` and the ``config.<n>.yaml`` a continued run saved beside it, oldest first."""
    folder = Path(folder)
    if not (folder / CONFIG_NAME).is_file():
        return []
    numbered = []
    for path in folder.glob("config.*.yaml"):  # CONFIG_N_RE decides
        match = CONFIG_N_RE.match(path.name)
        if match and path.is_file():
            numbered.append((int(match.group(1)), path))
    return [folder / CONFIG_NAME] + [path for _, path in sorted(numbered)]


def root_of_checkpoint(ckpt_path: str | os.PathLike) -> Path | None:
    """``ROOT`` for a checkpoint at ``ROOT/NAME/version_N/checkpoints/X.ckpt``, else ``None``."""
    found = run_of_checkpoint(ckpt_path)
    return None if found is None else found.path.parent.parent


@dataclass
class RebuildFields:
    """What a run's ``config.yaml`` contributes to a rebuild: checked model and data specs, plain data."""

    source: Path
    model: dict[str, Any]
    data: dict[str, Any] | None
    left_out: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``model RegressionModule(SimpleModel) and data SyntheticRegressionDataModule``."""
        sig = Signature.of({"model": self.model, "data": self.data})
        names = sig.describe().split(" + ")
        return f"model {names[0]}" + (f" and data {names[1]}" if len(names) > 1 else "")


def _looks_like_path(name: str, value: Any) -> bool:
    if _PATH_NAMES.search(name):
        return True
    if not isinstance(value, str):
        return False
    text = value.strip()
    return (
        os.path.isabs(text)
        or text.startswith(("~", "./", "../", "\\"))
        or "/../" in text
        or text.endswith("/..")
        or text == ".."
        or "://" in text
    )


def _plain_spec(node: Any, key: str, left_out: list[str]) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` of ``node`` with path-like init args (recursively) left out."""
    spec: dict[str, Any] = {"class_path": node.get("class_path")}
    args = node.get("init_args")
    if isinstance(args, Mapping):
        kept: dict[str, Any] = {}
        for name, value in args.items():
            where = f"{key}.init_args.{name}"
            if _looks_like_path(str(name), value):
                left_out.append(where)
            elif isinstance(value, Mapping) and "class_path" in value:
                kept[name] = _plain_spec(value, where, left_out)
            else:
                kept[name] = value
        spec["init_args"] = kept
    elif args is not None:
        spec["init_args"] = args  # refused by the build check with its one line
    for extra in node:
        if extra not in ("class_path", "init_args"):
            left_out.append(f"{key}.{extra}")
    return spec


def rebuild_fields(config: str | os.PathLike, trust_modules: Iterable[str] = ()) -> RebuildFields:
    """The model and data of a run's ``config.yaml``, checked before anything is imported or built.

    Raises:
        LitGpuError: The file is unreadable, has no ``model`` spec, or names a class the build policy
            refuses (:class:`~lit_gpu.checkpoints.build.UnsafeBuildError`); nothing was imported.
    """
    from lit_gpu.checkpoints import build as build

    path = Path(config)
    saved = _read(path)
    if saved is None:
        raise LitGpuError(messages.RUN_CONFIG_REFUSED.format(config=path, what="not a readable YAML mapping"))
    model = saved.get("model")
    if not (isinstance(model, Mapping) and isinstance(model.get("class_path"), str)):
        raise LitGpuError(
            messages.RUN_CONFIG_REFUSED.format(config=path, what="no model with a class_path in it")
        )
    left_out: list[str] = []
    specs: dict[str, dict[str, Any] | None] = {}
    for key, entry in (("model", model), ("data", saved.get("data"))):
        if not (isinstance(entry, Mapping) and isinstance(entry.get("class_path"), str)):
            specs[key] = None
            if entry is not None:
                left_out.append(key)
            continue
        specs[key] = _plain_spec(entry, key, left_out)
        build.check(
            specs[key],
            build.lightning_base(key),
            source=str(path),
            key=key,
            trust_modules=trust_modules,
            loader=True,
        )
    model_spec, data_spec = specs["model"], specs["data"]
    return RebuildFields(path, model_spec, data_spec, left_out)


# ---- a continued run's changed config -------------------------------------------------------------------
# how a run was started and where it lives, not what it trains
_IGNORED_CONFIG_KEYS = ("ckpt_path", "weights_only", "new_run", "free_gpus", "trainer.default_root_dir")


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: node}


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 3) -> list[str]:
    """What differs between two saved configs, as ``key: old -> new`` (at most ``limit``, then a count).

    Where a run lives and how it was started (``ckpt_path``, ``weights_only``, ``new_run``,
    ``free_gpus``, ``trainer.default_root_dir``) are not changes of the run.
    """
    before, after = _flatten(old), _flatten(new)
    keys = [
        k
        for k in dict.fromkeys([*before, *after])
        if before.get(k) != after.get(k) and not k.startswith(_IGNORED_CONFIG_KEYS)
    ]
    shown = [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys[:limit]]
    if len(keys) > limit:
        shown.append(f"and {len(keys) - limit} more")
    return shown


def next_config_path(folder: str | os.PathLike) -> Path:
    """``config.<n>.yaml`` with the next free ``n`` (from 1) in a run folder."""
    saved = saved_configs(folder)
    numbers = [int(m.group(1)) for p in saved if (m := CONFIG_N_RE.match(p.name))]
    return Path(folder) / f"config.{max(numbers, default=0) + 1}.yaml"
