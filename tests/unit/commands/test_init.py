"""``lit-gpu init``: a research project on the shipped recipes, its first fit, and no overwriting."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import yaml
from torch.nn import functional as F

from lit_gpu.cli import main
from lit_gpu.commands import init

FILES = ["README.md", "config.yaml", "my_research.py", "notebook.ipynb"]


def _exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code


def test_writes_the_project_and_says_what_next(tmp_path, capsys):
    assert _exit_code(["init", str(tmp_path / "proj")]) == 0
    assert sorted(p.name for p in (tmp_path / "proj").iterdir()) == FILES
    out = capsys.readouterr().out
    assert out.startswith("lit-gpu: wrote README.md, config.yaml, my_research.py, notebook.ipynb into ")
    assert f"next: cd {tmp_path / 'proj'} && {init.FIT}" in out
    readme = (tmp_path / "proj" / "README.md").read_text().splitlines()
    assert len(readme) == 5 and readme[0].startswith("# proj: ") and any(init.FIT in line for line in readme)
    notebook = json.loads((tmp_path / "proj" / "notebook.ipynb").read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert "lit_gpu:simple" in "".join(code[0]["source"])


def test_refuses_to_overwrite_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("mine: true\n")
    assert _exit_code(["init", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"lit-gpu: error: lit-gpu init {tmp_path}: config.yaml already exist; nothing was written; "
        "pick an empty or new folder\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]
    assert (tmp_path / "config.yaml").read_text() == "mine: true\n"
    assert _exit_code(["init", str(tmp_path / "config.yaml")]) == 2
    assert capsys.readouterr().err.endswith("is a file, not a folder; name a new or empty folder\n")


@pytest.mark.integration  # trains for seconds: not the inner loop (--fast)
def test_the_projects_first_fit_uses_its_classes_on_the_recipe(tmp_path, monkeypatch, capsys):
    init.init(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # what PYTHONPATH=. does for the README's command
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    argv = ["fit", *init.FIT_ARGS, "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false"]
    main(argv)  # returns after the fit (tool commands exit)
    saved = yaml.safe_load((tmp_path / "runs/lit_gpu/version_0/config.yaml").read_text())
    model = saved["model"]["init_args"]
    assert saved["model"]["class_path"] == "my_research.HuberRegression" and model["delta"] == 0.5
    assert model["net"] == {
        "class_path": "my_research.ResidualMLP",
        "init_args": {"in_features": 10, "out_features": 10, "hidden": 64},  # 10/10 from lit_gpu:simple
    }
    assert model["optimizer"]["class_path"] == "torch.optim.SGD" and saved["trainer"]["accelerator"] == "cpu"
    assert saved["data"]["init_args"]["teacher"] == "relu"

    import my_research

    module = my_research.HuberRegression(my_research.ResidualMLP(), delta=0.5)
    outputs, targets = torch.zeros(4, 10), torch.full((4, 10), 2.0)
    loss = module.compute_loss(outputs, targets)
    assert loss == F.huber_loss(outputs, targets, delta=0.5) == 0.5 * (2 - 0.25)  # delta * (|d| - delta / 2)
    sys.modules.pop("my_research")
    metrics = (tmp_path / "runs/lit_gpu/version_0/metrics.csv").read_text()
    assert "val/loss" in metrics


def _error_line(argv: list[str], capsys) -> str:
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lit-gpu: error: lit-gpu init "), err
    return err.strip()


def test_a_link_to_nothing_is_named_with_its_target(tmp_path, capsys):
    link = tmp_path / "proj"
    link.symlink_to(tmp_path / "gone")
    assert _error_line(["init", str(link)], capsys) == (
        f"lit-gpu: error: lit-gpu init {link}: {link} is a link to {tmp_path / 'gone'}, which does not "
        f"exist; create {tmp_path / 'gone'} first, or remove the link, or name another folder"
    )
    assert not (tmp_path / "gone").exists()


def test_a_file_in_the_way_of_the_folder_is_named(tmp_path, capsys):
    (tmp_path / "notes").write_text("mine\n")
    target = tmp_path / "notes" / "deeper" / "proj"
    line = _error_line(["init", str(target)], capsys)
    assert line.endswith(
        f"cannot create the folder: {tmp_path / 'notes'} is a file, not a folder; name a folder whose "
        f"parents are folders (or move {tmp_path / 'notes'} away)"
    )
    assert (tmp_path / "notes").read_text() == "mine\n"


def test_a_folder_without_permission_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    def denied(self, *args, **kwargs):  # what mkdir raises in a folder the user cannot write to (not root)
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(init.Path, "mkdir", denied)
    line = _error_line(["init", str(tmp_path / "proj")], capsys)
    assert f"cannot write {tmp_path / 'proj'}: permission denied; name a folder you can write to" in line


def test_a_write_that_fails_midway_leaves_no_file(tmp_path, capsys, monkeypatch):
    real_open = open

    def full_disk(path, mode="r", *args, **kwargs):
        if str(path).endswith("notebook.ipynb"):
            raise OSError(28, "No space left on device", str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full_disk)
    line = _error_line(["init", str(tmp_path / "proj")], capsys)
    assert "notebook.ipynb: No space left on device; no file of the project was left there" in line
    assert list((tmp_path / "proj").iterdir()) == []
