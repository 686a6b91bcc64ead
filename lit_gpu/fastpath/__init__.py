"""lit_gpu's fast path: Lightning's training step and batch glue without its dispatch layers, where nothing
in a fit can tell (the ``lit-gpu`` CLI adds it by default, as long as ``benchmarks/overhead.py`` shows it
ahead of Lightning's own loop; each piece stands aside for a fit it does not cover, and Lightning's loop
runs).

* ``step`` (:class:`LeanOptimizerStep`: the automatic-optimization step), ``graph`` (whole-step capture,
  ``--speed.cuda_graph``), ``batch`` (:class:`LeanTrainingBatch`: the per-batch glue, the result
  collection's ``log``), ``hooks`` (:class:`SkipIdleHooks`, fit patches, hook dispatch, when a fit is left
  to Lightning, :class:`NoProfiler`);
* :class:`PlainHookName` (a LightningModule mixin) and :func:`own_hook`, here.

The private Lightning names it reaches and the functions it mirrors are declared in lit_gpu.upstream's
table (features "fast path", "capture", "hook name"), with its gate. Importing this package imports
neither torch nor Lightning; the names below load their module on first use.
"""

from __future__ import annotations

from typing import Any

#: public name -> the module of this package that defines it
_LAZY = {
    "LeanOptimizerStep": "step",
    "LeanTrainingBatch": "batch",
    "SkipIdleHooks": "hooks",
    "NoProfiler": "hooks",
    "skip_idle_profiler": "hooks",
    "StepGraph": "graph",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from lit_gpu.fastpath import batch, graph, hooks, step

        modules = {"batch": batch, "graph": graph, "hooks": hooks, "step": step}
        return getattr(modules[_LAZY[name]], name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def own_hook(obj: object, hook: str, base: type) -> Any:
    """``obj``'s bound ``hook`` if it is callable and not ``base``'s empty method, else None."""
    fn = getattr(obj, hook, None)
    if callable(fn) and getattr(fn, "__func__", None) is not getattr(base, hook, None):
        return fn
    return None


def _hook_name_aside() -> bool:
    from lit_gpu.upstream import stands_aside

    return stands_aside("hook name")


class PlainHookName:
    """LightningModule mixin: Lightning's ``_current_fx_name`` set without ``nn.Module``'s attribute checks.

    Lightning's dispatch sets ``module._current_fx_name`` (the hook now running, which ``self.log``
    reads) before and after every hook call, some 30 times a training step; ``nn.Module.__setattr__``
    checks each value against ``Parameter``, ``Buffer`` and ``Module`` (Python-level instance checks).
    The name is a ``str`` or ``None``, never one of them: it is stored as a plain attribute, where
    ``nn.Module.__setattr__`` puts it too. Pinned by test_lightning_module__current_fx_name; behind the
    gate's "hook name" (aside: ``nn.Module.__setattr__`` stores it).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_current_fx_name" and not _hook_name_aside():
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


__all__ = [
    "LeanOptimizerStep",
    "LeanTrainingBatch",
    "NoProfiler",
    "PlainHookName",
    "SkipIdleHooks",
    "StepGraph",
    "own_hook",
    "skip_idle_profiler",
]
