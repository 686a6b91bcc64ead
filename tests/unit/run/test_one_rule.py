"""Each rule of a run's layout is defined once, in lit_gpu/run/layout.py (issue 48).

What counts as a version folder, the names of a run's files, a checkpoint's run folder, the files of a
start and how ``last`` is chosen had several definitions that disagreed; these tests import the one
definition and check that the other places use it, and that no module outside ``lit_gpu/run/`` spells a
folder or file name of the run itself.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import torch

from lit_gpu.run import folder, layout, store
from lit_gpu.run import layout as claim
from lit_gpu.run import layout as links
from lit_gpu.run import store as choice
from lit_gpu.run import store as config
from tests.helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "lit_gpu"
#: names and patterns of a run's layout; a constant holding one (without a space: a name, a glob, a regex,
#: not a sentence) outside lit_gpu/run/ is a second definition
NAMES = ("version_", "config.yaml", "metrics.csv", "hparams.yaml", ".lit_gpu.lock", "hpc_ckpt", "evaluations")
#: (module, name) -> why it is not the run's layout
ALLOWED = {
    ("lit_gpu/files/sweep_storage.py", "version_"): "a sweep trial's folder; lit_gpu.files cannot import run",
    ("lit_gpu/commands/init.py", "config.yaml"): "the config file of a project lit-gpu init writes",
    (
        "lit_gpu/cli/completion_flags.py",
        "version_",
    ): "generated: Lightning's --checkpoint.enable_version_counter",
    ("lit_gpu/__init__.py", "checkpoints"): "the submodule lit_gpu.checkpoints",
}

ODD_VERSIONS = ("version_01", "version_abc", "version_" + "9" * 20, "version_\u0663")


def _constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_no_module_outside_the_run_package_spells_a_name_of_the_layout():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(REPO_ROOT))
        if module.startswith("lit_gpu/run/"):
            continue
        for line, value in _constants(path):
            for name in NAMES:
                if (
                    name in value
                    and " " not in value
                    and value != "__version__"
                    and (module, name) not in ALLOWED
                ):
                    found.append(f"{module}:{line}: {value!r}")
            if value == "checkpoints" and (module, value) not in ALLOWED:
                found.append(f"{module}:{line}: 'checkpoints' (layout.CHECKPOINTS)")
    assert found == []


def test_a_version_folder_is_one_rule_everywhere(tmp_path):
    """The layout, the config of a checkpoint, a checkpoint's run and the links check agree."""
    for name in ODD_VERSIONS:
        assert layout.version_number(name) is None
        ckpt = tmp_path / "lit_gpu" / name / layout.CHECKPOINTS / "last.ckpt"
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"x")
        (ckpt.parent.parent / layout.CONFIG_NAME).write_text("model: {class_path: x.Y}\n")
        assert layout.run_of_checkpoint(ckpt) is None and config.config_of_checkpoint(ckpt) is None
        assert config.root_of_checkpoint(ckpt) is None
    assert layout.list_runs(tmp_path / "lit_gpu") == []
    good = tmp_path / "lit_gpu" / "version_7" / layout.CHECKPOINTS / "last.ckpt"
    good.parent.mkdir(parents=True)
    good.write_bytes(b"x")
    (good.parent.parent / layout.CONFIG_NAME).write_text("model: {class_path: x.Y}\n")
    run = layout.run_of_checkpoint(good)
    assert (
        run is not None
        and run.version == 7
        and [r.path for r in layout.list_runs(run.path.parent)] == [run.path]
    )
    assert config.config_of_checkpoint(good) == run.path / layout.CONFIG_NAME
    assert config.root_of_checkpoint(good) == tmp_path
    assert links.escaping_links(run.path) == []


def test_the_files_of_a_start_are_one_rule(tmp_path):
    """What a take-over clears and what makes a failed start's folder removable: one definition."""
    start = ["config.yaml", "config.1.yaml", "hparams.yaml", "events.out.tfevents.1.host"]
    assert all(layout.is_start_file(name) for name in start)
    assert not layout.is_start_file(layout.METRICS_NAME) and layout.is_start_file(
        layout.METRICS_NAME, metrics=True
    )
    run = tmp_path / "version_0"
    run.mkdir()
    for name in [*start, layout.LOCK_NAME]:
        (run / name).write_text("x")
    assert folder.remove_if_unused(run) and not run.exists()
    run.mkdir()
    for name in [*start, layout.METRICS_NAME]:
        (run / name).write_text("x")
    claim._clear_start_files(run)
    assert list(run.iterdir()) == []


def test_last_is_chosen_by_one_rule_the_highest_complete_step(tmp_path):
    """Never by file time: the store reads each header once and run/choice.py picks the highest step."""
    files = []
    for name, step, mtime in (("last.ckpt", 5, 300), ("last-v1.ckpt", 9, 100)):
        path = tmp_path / name
        torch.save({"global_step": step, "epoch": 0, "state_dict": {}}, path)
        os.utime(path, (mtime, mtime))
        files.append(choice.CkptFacts(path, True, step))
    assert choice.choose_file(files, "last").path.name == "last-v1.ckpt"
    where = store.Where(dirpath=str(tmp_path), parents=[])
    chosen, headers, _data = store._read_files(layout.checkpoints_in(tmp_path, "last"), "last", where)
    assert chosen is not None and chosen.path.name == "last-v1.ckpt" and headers[chosen.path].step == 9
    assert not hasattr(store, "find_last_checkpoint") and "find_last_checkpoint" not in dir(
        __import__("lit_gpu.checkpoints", fromlist=["x"])
    )


def test_cluster_checkpoints_and_config_names_have_one_definition():
    assert layout.cluster_checkpoint_number("hpc_ckpt_3.ckpt") == 3
    assert layout.is_config_name("config.yaml") and layout.is_config_name("config.2.yaml")
    assert not layout.is_config_name("config.old.yaml")
    assert config.CONFIG_NAME is layout.CONFIG_NAME and config.CONFIG_N_RE is layout.CONFIG_N_RE
