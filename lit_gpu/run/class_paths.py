"""Class paths that moved: the one table of old names a run's ``config.yaml`` may hold, and the public names.

Earlier lit_gpu versions wrote where the default callbacks' files were (``lit_gpu.callbacks.step_path.
LeanOptimizerStep``) into every run's ``config.yaml``; now the public names are written
(``lit_gpu.callbacks.LeanOptimizerStep``), so files can move. A config naming an old path still loads:
:func:`current` puts the public name in its place when a config is parsed, by the CLI
(:func:`lit_gpu.cli.config_files.load`: every ``--config`` file and YAML value) and when lit_gpu reads a run's
saved config (:mod:`lit_gpu.run.config`). No module is kept at an old path to be imported instead.

Only ``class_path`` values equal to a key of :data:`MOVED` change; nothing is imported to decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MOVED", "current"]

#: class paths earlier lit_gpu versions wrote into a run's config.yaml (the default callbacks' files, which
#: moved: ``lit_gpu/callbacks/{step_path,batch_path}.py`` are gone) -> the public name
MOVED: Mapping[str, str] = {
    "lit_gpu.runs.RunFolderSync": "lit_gpu.callbacks.RunFolderSync",
    "lit_gpu.callbacks.rng_state.RNGStateCallback": "lit_gpu.callbacks.RNGStateCallback",
    "lit_gpu.callbacks.logging_state.LoggingStateCallback": "lit_gpu.callbacks.LoggingStateCallback",
    "lit_gpu.callbacks.interrupt.CheckpointOnInterrupt": "lit_gpu.callbacks.CheckpointOnInterrupt",
    "lit_gpu.callbacks.oom_recovery.OOMLoopName": "lit_gpu.callbacks.OOMLoopName",
    "lit_gpu.callbacks.step_path.SkipIdleHooks": "lit_gpu.callbacks.SkipIdleHooks",
    "lit_gpu.callbacks.step_path.LeanOptimizerStep": "lit_gpu.callbacks.LeanOptimizerStep",
    "lit_gpu.callbacks.batch_path.LeanTrainingBatch": "lit_gpu.callbacks.LeanTrainingBatch",
    "lit_gpu.upstream.step_path.SkipIdleHooks": "lit_gpu.callbacks.SkipIdleHooks",
    "lit_gpu.upstream.hooks.SkipIdleHooks": "lit_gpu.callbacks.SkipIdleHooks",
    "lit_gpu.upstream.step_path.LeanOptimizerStep": "lit_gpu.callbacks.LeanOptimizerStep",
    "lit_gpu.upstream.batch_path.LeanTrainingBatch": "lit_gpu.callbacks.LeanTrainingBatch",
    "lit_gpu.io.AtomicCheckpointIO": "lit_gpu.checkpoints.io.AtomicCheckpointIO",
}

_MAX_NODES = 2_000_000  # containers one walk visits at most (parsed configs are bounded far below)


def current(tree: Any) -> Any:
    """``tree`` (plain parsed data) with every ``class_path`` value of :data:`MOVED` replaced, in place.

    Iterative and bounded: a walk over data never recurses on its shape.
    """
    stack, walked = [tree], 0
    while stack and walked < _MAX_NODES:
        node = stack.pop()
        walked += 1
        if isinstance(node, dict):
            path = node.get("class_path")
            if isinstance(path, str) and path in MOVED:
                node["class_path"] = MOVED[path]
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return tree
