"""``lit_gpu.checkpoints.read.inside``: the path-containment check behind every "stays in the run folder"
promise, with the vectors of the round-8 attacker pass (a checked path must be the path that is used)."""

from __future__ import annotations

import os
from pathlib import Path

from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.checkpoints.read import inside


class SaysOneOpensAnother(os.PathLike):
    """A path object whose ``str()`` names a file inside the folder and whose ``__fspath__`` (what ``open``
    uses) names one outside it."""

    def __init__(self, shown: Path, opened: Path) -> None:
        self.shown, self.opened = shown, opened

    def __str__(self) -> str:
        return str(self.shown)

    def __fspath__(self) -> str:
        return str(self.opened)


def test_inside_strictly_inside_only(tmp_path):
    folder = tmp_path / "run"
    (folder / "sub").mkdir(parents=True)
    os.symlink(tmp_path, folder / "out")
    assert inside(folder / "sub" / "last.ckpt", folder)
    assert inside(str(folder / "x" / ".." / "sub"), folder)
    for path in (
        folder,  # the folder itself
        f"{folder}/.",
        folder / "sub" / ".." / "..",
        folder / "out" / "victim",  # through a link out
        f"file://{folder}/sub",
        f"{folder}/sub\x00",
        str(folder / "sub").encode(),  # bytes: not a path lit_gpu reads
        ["x"],
        "",
    ):
        assert not inside(path, folder), path


def test_inside_checks_the_path_that_opening_would_use(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    assert not inside(SaysOneOpensAnother(folder / "a.ckpt", tmp_path / "victim"), folder)
    assert inside(SaysOneOpensAnother(tmp_path / "victim", folder / "a.ckpt"), folder)


def test_a_checkpoint_link_named_with_tilde_is_not_removed(tmp_path, monkeypatch, capsys):
    """``~`` is expanded by ``inside`` and by fsspec's removal: the "not a link" test must expand it too."""
    home = tmp_path / "home"
    folder = home / "ck"
    folder.mkdir(parents=True)
    (folder / "a.ckpt").write_text("kept")
    os.symlink(folder / "a.ckpt", folder / "link.ckpt")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    callback = FreshLastCheckpoint(dirpath=folder)
    callback._remove_checkpoint(None, "~/ck/link.ckpt")  # type: ignore[arg-type]  # refused before the trainer is used
    assert (folder / "link.ckpt").is_symlink() and (folder / "a.ckpt").read_text() == "kept"
    assert "link.ckpt" in capsys.readouterr().err


def test_dropped_paths_and_callback_names_from_a_file_are_printed_escaped(tmp_path, capsys):
    import torch

    from lit_gpu.checkpoints.read import drop_outside_paths, read_for_resume

    evil = "/tmp/\x1b]0;TITLE\x07\x1b[2J\nlit-gpu: error: forged"

    def callbacks() -> dict:
        return {
            "ModelCheckpoint{'monitor': None}": {"best_model_path": evil},
            "Evil\x1b[31m\nlit-gpu: forged{": {"last_model_path": evil, "best_k_models": {evil: 1.0}},
        }

    dropped = drop_outside_paths({"callbacks": callbacks()}, tmp_path)
    assert len(dropped) == 3
    assert all(c not in line for line in dropped for c in "\x1b\x07\n")
    assert dropped[0].startswith("ModelCheckpoint.best_model_path -> /tmp/\\x1b]0;TITLE\\x07")
    path = tmp_path / "last.ckpt"
    torch.save({"pytorch-lightning_version": "2.6.6", "callbacks": callbacks()}, path)
    read_for_resume(path)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b[31m" in err
