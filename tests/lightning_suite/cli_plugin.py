"""pytest plugin: Lightning's own LightningCLI tests, with every ``LightningCLI`` they build a ``LitGpuCLI``.

Loaded into *Lightning's own* test suite by ``.ci/lightning_tests.py --tier cli``
(``-p tests.lightning_suite.cli_plugin``), so that Lightning's tests judge whether ``lit-gpu`` is still
LightningCLI (issue 55). Before the test modules are imported, ``lightning.pytorch.cli.LightningCLI`` becomes
:class:`LightningCLIThroughLitGpu` (a ``LitGpuCLI``: LightningCLI's constructor, parameters in the same
order; the arguments a test passes reach it as the test passes them, positionally where it does, the others
are lit_gpu's defaults) and ``LightningArgumentParser`` becomes
lit_gpu's parser (:class:`~lit_gpu.cli.lightning_cli.ConciseErrorParser`).

The routing is checked, not assumed: every CLI a test builds is counted by its kind (``lit_gpu`` for a
``LitGpuCLI``, ``plain`` for any other ``LightningCLI``) and recorded in the test's JUnit properties
(``clis_lit_gpu``, ``clis_plain``); the script compares them with the plain run's counts. Set
``LIT_GPU_PLUGIN_OFF=1`` to route nothing and count only.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

#: CLIs built by the running test, by kind
_BUILT: Counter[str] = Counter()


def _counting(init: Any, lit_gpu_cli: type | None) -> Any:
    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _BUILT["lit_gpu" if lit_gpu_cli is not None and isinstance(self, lit_gpu_cli) else "plain"] += 1
        init(self, *args, **kwargs)

    __init__._lit_gpu_counted = True  # type: ignore[attr-defined]
    return __init__


def _route() -> type:
    """Replace LightningCLI and LightningArgumentParser in ``lightning.pytorch.cli`` by lit_gpu's."""
    import lightning.pytorch.cli as cli

    from lit_gpu.cli.lightning_cli import ConciseErrorParser, LitGpuCLI
    from lit_gpu.upstream import FEATURES, problem

    for name in FEATURES:  # the gate reads Lightning's own classes (cached), before they are replaced here
        problem(name)
    cli.LightningCLI = _through_lit_gpu()  # type: ignore[misc]
    cli.LightningArgumentParser = ConciseErrorParser  # type: ignore[misc]
    return LitGpuCLI


@functools.cache
def _through_lit_gpu() -> type:
    """``LitGpuCLI`` as ``LightningCLI``: the same constructor (parameters and their order), so every
    argument reaches it as the test passes it, positionally where the test does."""
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    built = type("LightningCLIThroughLitGpu", (LitGpuCLI,), {"__module__": __name__})
    built.__qualname__ = "LightningCLIThroughLitGpu"
    return built


def __getattr__(name: str) -> Any:  # pickle finds the class by its name here (ddp_spawn's ranks)
    if name == "LightningCLIThroughLitGpu":
        return _through_lit_gpu()
    raise AttributeError(name)


def pytest_configure(config: pytest.Config) -> None:
    import lightning.pytorch.cli as cli

    base = cli.LightningCLI
    lit_gpu_cli = None if os.environ.get("LIT_GPU_PLUGIN_OFF") == "1" else _route()
    if not getattr(base.__init__, "_lit_gpu_counted", False):  # the base every CLI's __init__ reaches
        base.__init__ = _counting(base.__init__, lit_gpu_cli)  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _BUILT.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    item.user_properties.append(("clis_lit_gpu", _BUILT["lit_gpu"]))
    item.user_properties.append(("clis_plain", _BUILT["plain"]))
    return (yield)


def pytest_report_header(config: pytest.Config) -> str:
    on = os.environ.get("LIT_GPU_PLUGIN_OFF") != "1"
    return f"lit_gpu cli plugin: {'LightningCLI -> LitGpuCLI' if on else 'loaded, counting only'}"
