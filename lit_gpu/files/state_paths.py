"""File paths inside a checkpoint's callback state: which lead outside its folder, dropped before a resume."""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from lit_gpu import messages

__all__ = ["STATE_PATH_KEYS", "drop_outside_paths", "drop_outside_state_paths", "inside"]

# fields of callback state (Lightning's ModelCheckpoint and friends) that name files; "dirpath" is only
# compared with the callback's own folder by Lightning and never written to or deleted
STATE_PATH_KEYS = ("best_model_path", "last_model_path", "kth_best_model_path")


def inside(path: Any, folder: str | os.PathLike) -> bool:
    """Whether ``path`` names something strictly inside ``folder`` after resolving real paths.

    ``..``, absolute paths, ``~`` and symlinks (of the path and of the folder) are resolved first;
    a URL (``s3://``, ``file://``) or a non-string is never inside.
    """
    if not isinstance(path, str | os.PathLike):
        return False
    text = os.fspath(path)  # what opening it uses (a PathLike's str() may say something else)
    if not isinstance(text, str) or not text or "://" in text or "\x00" in text:
        return False
    real = os.path.realpath(os.path.expanduser(text))
    base = os.path.realpath(os.path.expanduser(str(folder)))
    return real != base and os.path.commonpath([real, base]) == base


def drop_outside_paths(checkpoint: Any, folder: str | os.PathLike) -> list[str]:
    """Blank every file path in ``checkpoint["callbacks"]`` state that leads outside ``folder``.

    Lightning's ``ModelCheckpoint`` restores ``best_model_path``, ``last_model_path``,
    ``kth_best_model_path`` and ``best_k_models`` from a checkpoint and later deletes "the previous"
    of them, recursively; its guard compares ``Path.absolute()``, which keeps ``..``. A path that does
    not resolve into ``folder`` (the checkpoint's own folder) becomes ``""``, and such ``best_k_models``
    entries are removed. Returns ``"entry.field -> resolved path"`` for each one dropped.
    """
    callbacks = checkpoint.get("callbacks") if isinstance(checkpoint, Mapping) else None
    if not isinstance(callbacks, MutableMapping):
        return []
    dropped: list[str] = []
    for name, state in callbacks.items():
        if isinstance(state, MutableMapping):
            # "ModelCheckpoint{'monitor': ...}" -> "ModelCheckpoint"
            label = messages.shown(str(name).split("{", 1)[0], limit=40)
            dropped.extend(f"{label}.{what}" for what in drop_outside_state_paths(state, folder))
    return dropped


def _shown(value: Any) -> str:
    """A path from callback state, resolved, as one safe line (it came from the file)."""
    if isinstance(value, str) and "://" not in value and "\x00" not in value:
        return messages.shown(os.path.realpath(os.path.expanduser(value)))
    return messages.shown(repr(value), limit=80)


def drop_outside_state_paths(state: MutableMapping[str, Any], folder: str | os.PathLike) -> list[str]:
    """:func:`drop_outside_paths` for one callback's state; returns ``"field -> resolved path"``."""
    dropped: list[str] = []
    for key in STATE_PATH_KEYS:
        value = state.get(key)
        if value and not inside(value, folder):
            dropped.append(f"{key} -> {_shown(value)}")
            state[key] = ""
    best_k = state.get("best_k_models")
    if isinstance(best_k, MutableMapping):
        for path in [p for p in best_k if not inside(p, folder)]:
            dropped.append(f"best_k_models -> {_shown(path)}")
            del best_k[path]
    elif best_k is not None:
        dropped.append("best_k_models (not a mapping)")
        state["best_k_models"] = {}
    return dropped
