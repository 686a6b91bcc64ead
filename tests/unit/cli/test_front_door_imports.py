"""The import graph of the commands that train nothing: fresh interpreters, ``sys.modules`` afterwards.

``import lit_gpu`` and the front door (``--help``, ``--version``, a mistyped command, ``configs``,
``configs NAME``, ``init DIR``) import neither torch nor Lightning; ``env`` imports torch,
not Lightning. ``Trainer(strategy="dp")`` works after ``import lit_gpu.strategies``, in either order.
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
    ]
    seen = _heavy_after(commands, tmp_path)
    assert seen == {name: [] for name in seen}, "a front-door command imported a heavy module"
    assert (tmp_path / "project" / "config.yaml").is_file()  # init did run


@pytest.mark.integration  # a fresh interpreter importing torch: not the inner loop
def test_env_imports_torch_but_not_lightning(tmp_path):
    seen = _heavy_after([["env", "--json"]], tmp_path)
    assert "torch" in seen["env --json"]
    assert not [m for m in seen["env --json"] if m.startswith(("lightning", "pytorch_lightning"))]


DP_WORKS = """
import sys
{imports}
import lightning.pytorch as pl
trainer = pl.Trainer(strategy="dp", accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
print(type(trainer.strategy).__name__, pl.__spec__.loader is pl.__loader__, type(pl.__loader__).__name__)
"""


@pytest.mark.integration  # a fresh interpreter importing Lightning each
@pytest.mark.parametrize(
    "imports",
    [
        "import lit_gpu.strategies",  # then Lightning
        "import lightning.pytorch; import lit_gpu.strategies",  # Lightning first
        # a module that imports the strategies itself (CI)
        pytest.param("import lit_gpu.callbacks", marks=pytest.mark.full),
    ],
)
def test_trainer_strategy_dp_works_in_either_import_order(imports):
    done = subprocess.run(
        [sys.executable, "-c", DP_WORKS.format(imports=imports)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # Lightning's module keeps its own loader: lit_gpu hooks nothing into the import system
    assert done.stdout.split() == ["DataParallelStrategy", "True", "SourceFileLoader"]


def test_subpackages_are_attributes_of_the_package():
    import lit_gpu

    assert lit_gpu.nets.FooNet.__name__ == "FooNet"
    assert lit_gpu.modules.ClassificationModule.__name__ == "ClassificationModule"
    assert lit_gpu.strategies.DataParallelStrategy.__name__ == "DataParallelStrategy"
    assert {"modules", "data", "nets", "callbacks", "cli"} <= set(dir(lit_gpu))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = lit_gpu.nope
