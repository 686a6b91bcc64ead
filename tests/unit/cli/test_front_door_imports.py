"""The import graph of the commands that train nothing: fresh interpreters, ``sys.modules`` afterwards.

``import lit_gpu`` and the front door (``--help``, ``--version``, a mistyped command, ``configs``,
``configs NAME``, ``init DIR``, ``completion``) import neither torch nor Lightning; ``env`` imports torch,
not Lightning. ``Trainer(strategy="dp")`` is still registered wherever lit_gpu's users rely on it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

HEAVY = ("torch", "lightning", "pytorch_lightning", "torchmetrics", "jsonargparse", "numpy")

# each command runs in one fresh interpreter, in turn; the heavy modules present after each are recorded
RUN = """
import json, sys
from lit_gpu.cli.main import main
heavy = {heavy!r}
seen = {{"import lit_gpu": sorted(m for m in sys.modules if m.split(".")[0] in heavy)}}
for argv in {commands!r}:
    try:
        main(argv)
    except SystemExit:
        pass
    seen[" ".join(argv)] = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
print(json.dumps(seen))
"""


def _heavy_after(commands: list[list[str]], cwd) -> dict[str, list[str]]:
    code = RUN.format(heavy=HEAVY, commands=commands)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_front_door_commands_import_neither_torch_nor_lightning(tmp_path):
    commands = [
        ["--help"],
        ["--version"],
        ["fitt"],
        [],
        ["configs"],
        ["configs", "mnist"],
        ["configs", "--path", "trainer/gpu"],
        ["configs", "no_such_recipe"],
        ["init", str(tmp_path / "project")],
        ["init", str(tmp_path / "project")],  # refused: the files exist (an error line, exit 2)
        ["completion", "bash"],
        ["completion", "zsh"],
    ]
    seen = _heavy_after(commands, tmp_path)
    assert seen == {name: [] for name in seen}, "a front-door command imported a heavy module"
    assert (tmp_path / "project" / "config.yaml").is_file()  # init did run


def test_env_imports_torch_but_not_lightning(tmp_path):
    seen = _heavy_after([["env", "--json"]], tmp_path)
    assert "torch" in seen["env --json"]
    assert not [m for m in seen["env --json"] if m.startswith(("lightning", "pytorch_lightning"))]


DP_REGISTERED = (
    "import sys; {imports}; from lightning.pytorch.strategies import StrategyRegistry; "
    "print('dp' in StrategyRegistry)"
)


@pytest.mark.integration  # a fresh interpreter importing Lightning each
@pytest.mark.parametrize(
    ("imports", "registered"),
    [
        ("import lit_gpu.modules", True),
        ("import lit_gpu.callbacks", True),
        ("import lit_gpu; import lightning.pytorch", False),  # import lit_gpu alone never imports Lightning
    ],
)
def test_the_dp_strategy_is_registered_by_the_modules_that_import_lightning(imports, registered):
    done = subprocess.run(
        [sys.executable, "-c", DP_REGISTERED.format(imports=imports)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(registered)


def test_subpackages_are_attributes_of_the_package():
    import lit_gpu

    assert lit_gpu.nets.FooNet.__name__ == "FooNet"
    assert lit_gpu.modules.ClassificationModule.__name__ == "ClassificationModule"
    assert lit_gpu.strategies.DataParallelStrategy.__name__ == "DataParallelStrategy"
    assert {"modules", "data", "nets", "callbacks", "cli"} <= set(dir(lit_gpu))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = lit_gpu.nope
