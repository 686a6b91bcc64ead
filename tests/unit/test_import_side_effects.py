"""``import lit_gpu`` (and every module of it) leaves warning and logging filters untouched,
``import lit_gpu.strategies`` registers ``strategy="dp"`` (the other order: test_front_door_imports.py),
and importing the command modules does not import optuna: one fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.integration  # every test here starts a fresh interpreter

SNAPSHOT = """
import json, logging, pkgutil, importlib, warnings, sys

def snapshot():
    loggers = {
        name: [repr(f) for f in logger.filters] + [logging.getLevelName(logger.level)]
        for name, logger in sorted(logging.root.manager.loggerDict.items())
        if isinstance(logger, logging.Logger) and name.startswith(("lightning", "pytorch_lightning"))
    }
    return {"warnings": [repr(f) for f in warnings.filters], "loggers": loggers}

# third-party packages first: their own import-time filters are not lit_gpu's doing
import lightning.pytorch, torchvision, jsonargparse, torchmetrics  # noqa
before = snapshot()
import lit_gpu
after_package = snapshot()
import lit_gpu.strategies
from lightning.pytorch.strategies import StrategyRegistry
dp_registered = "dp" in StrategyRegistry
import lit_gpu.commands, lit_gpu.cli  # noqa
optuna_by_commands = "optuna" in sys.modules
for info in pkgutil.walk_packages(lit_gpu.__path__, "lit_gpu."):
    if info.name != "lit_gpu.__main__":
        importlib.import_module(info.name)
after_all = snapshot()
json.dump({"before": before, "package": after_package, "all": after_all, "dp_registered": dp_registered,
           "optuna_by_commands": optuna_by_commands}, sys.stdout)
"""


@pytest.fixture(scope="module")
def snaps() -> dict:
    """What the fresh interpreter of :data:`SNAPSHOT` saw."""
    out = subprocess.run(
        [sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    ).stdout
    return json.loads(out)


def test_import_lit_gpu_changes_no_warning_or_logging_filter(snaps):
    assert snaps["package"]["warnings"] == snaps["before"]["warnings"]
    assert snaps["package"]["loggers"] == snaps["before"]["loggers"]
    assert snaps["all"]["warnings"] == snaps["before"]["warnings"]
    assert snaps["all"]["loggers"] == snaps["before"]["loggers"]
    assert snaps["before"]["loggers"], "expected Lightning's loggers to exist after importing it"


def test_import_after_lightning_registers_the_dp_strategy(snaps):
    assert snaps["dp_registered"] is True


def test_importing_the_commands_does_not_import_optuna(snaps):
    assert snaps["optuna_by_commands"] is False  # `lit-gpu sweep` imports it when it runs


def test_the_cli_quiets_when_main_runs(capsys):
    import warnings

    from lit_gpu.cli import main

    with warnings.catch_warnings():
        try:
            main(["env", "--json"])
        except SystemExit as exit_:
            assert exit_.code == 0
        patterns = [f[1].pattern for f in warnings.filters if f[1] is not None]
    assert any("The dirpath has changed" in p for p in patterns)
    capsys.readouterr()
