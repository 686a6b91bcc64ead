"""Lightning's (torch's, torchmetrics', jsonargparse's, optuna's) private parts are reached only in
``lit_gpu/upstream/``: a scan of the source's syntax tree (not a grep), and of the classes at run time."""

from __future__ import annotations

import importlib
import inspect

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.private_names import (
    METACLASS_SET,
    UPSTREAM,
    defined_names,
    files_outside,
    private,
    reaches,
)


def _defined() -> dict[str, set[str]]:
    return defined_names(files_outside())


def test_no_private_upstream_name_outside_the_room():
    defined = _defined()
    outside = {str(p.relative_to(REPO_ROOT)): hits for p in files_outside() if (hits := reaches(p, defined))}
    assert outside == {}, "reach it through a small public function in lit_gpu/upstream/ (behind the gate)"


@pytest.mark.parametrize(
    "source",
    [
        "x = trainer._signal_connector",
        "from lightning.fabric.strategies import _StrategyRegistry",
        "import torch.utils.data._utils",
        "x = getattr(trainer, '_logger_connector', None)",
        "x = state['_batches_that_stepped']",
        "x = hparams.pop('_instantiator', None)",
        "class C(ModelCheckpoint):\n    def f(self):\n        return self._last_time_checked",
    ],
)
def test_the_scan_finds_each_kind_of_reach(tmp_path, source):
    path = tmp_path / "m.py"
    path.write_text(source + "\n")
    assert reaches(path, {}), source


def test_no_class_outside_the_room_overrides_a_private_upstream_member():
    """At run time: a private name a lit_gpu class defines is not one its upstream bases have (an override
    of a protected hook lives in the room, e.g. upstream/checkpointing.py)."""
    found = []
    for path in files_outside():
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        if parts[-1] == "__main__" or "completion_flags" in parts:
            continue
        module = importlib.import_module(".".join(p for p in parts if p != "__init__"))
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            upstream_bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in UPSTREAM]
            for name in vars(cls):
                if (
                    private(name)
                    and name not in METACLASS_SET
                    and any(hasattr(b, name) for b in upstream_bases)
                ):
                    found.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert found == []
