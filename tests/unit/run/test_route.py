"""The route of ``--ckpt_path``, recorded as it runs: the run package once, the reader once (issue 48).

Measured by :mod:`tests.helpers.route` (rooms: lit_gpu's packages; a return: a room entered again; a climb:
a call from a lower layer into a higher one). docs/architecture.md, "The route of --ckpt_path", writes
the same routes down.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lit_gpu.checkpoints import read as checkpoint_facts
from lit_gpu.cli.ckpt_path import resolve_ckpt_path
from lit_gpu.run import folder, store
from tests.helpers.route import recorded
from tests.helpers.run_store import DATA, MODEL, subcommand


def _runs(root: Path, versions: int = 2, files: tuple[str, ...] = ("last.ckpt", "last-v1.ckpt")) -> list:
    made = []
    for version in range(versions):
        run = root / "lit_gpu" / f"version_{version}"
        (run / "checkpoints").mkdir(parents=True)
        (run / "config.yaml").write_text(f"model:\n  class_path: {MODEL}\ndata:\n  class_path: {DATA}\n")
        for step, name in enumerate(files, start=3):
            path = run / "checkpoints" / name
            torch.save(
                {
                    "global_step": step,
                    "epoch": 0,
                    "state_dict": {},
                    "pytorch-lightning_version": "2.6.6",
                    "hyper_parameters": {"_class_path": MODEL},
                },
                path,
            )
            made.append(path)
    return made


def _counted(monkeypatch) -> list[Path]:
    """Calls of the checkpoint reader's one door, by file."""
    looked: list[Path] = []
    real = checkpoint_facts.inspect

    def inspect(path, *args, **kwargs):
        looked.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(store, "inspect", inspect)
    return looked


@pytest.mark.parametrize("command", ["fit", "test"])
def test_a_file_enters_the_run_package_once_and_the_reader_once(tmp_path, monkeypatch, command):
    ckpt = _runs(tmp_path)[-1]
    looked = _counted(monkeypatch)
    config = subcommand(tmp_path, str(ckpt), command)
    with recorded() as route:
        resolution = resolve_ckpt_path(config)
    assert resolution is not None and resolution.path == str(ckpt) and resolution.header.step == 4
    assert route.stays == ["cli", "run", "checkpoints", "run", "cli"], route.describe()
    assert len(route.rooms) <= 3 and route.returns <= 3 and route.climbs == [] and route.leaf_calls == []
    assert looked == [ckpt]  # one look at the file: the link, whether it is whole, its header, its kind

    with recorded() as handed_on:  # the resolution handed on: the folder the run writes into
        run_folder = folder.of_command(command, config[command], resolution)
    assert handed_on.stays[0] == "run" and len(handed_on.rooms) <= 3, handed_on.describe()
    assert handed_on.returns <= 3 and handed_on.climbs == [] and handed_on.leaf_calls == []
    if command == "fit":
        assert run_folder.continues is not None and run_folder.continues.folder == ckpt.parent.parent
    else:
        assert run_folder.evaluates is not None and run_folder.evaluates.run == ckpt.parent.parent


def test_last_reads_each_file_once_and_never_climbs_back(tmp_path, monkeypatch, capsys):
    made = _runs(tmp_path)
    looked = _counted(monkeypatch)
    with recorded() as route:
        resolution = resolve_ckpt_path(subcommand(tmp_path, "last"))
    assert resolution is not None and resolution.path == str(made[-1])
    newest = [path for path in made if path.parent.parent.name == "version_1"]
    # only the chosen run's files, each looked at once; the chosen one once more, keeping the bytes the load
    # reads (its header compared with the one it was chosen by)
    assert sorted(looked) == sorted([*newest, made[-1]])
    assert route.rooms == ["cli", "run", "checkpoints"] and route.climbs == [] and route.leaf_calls == []
    # the checkpoint reader once per look (each run's config.yaml is the text reader's, a leaf)
    assert route.count("checkpoints") == len(looked), route.describe()
    assert route.count("cli") == 2  # one call of the store, one answer applied


def test_a_link_out_of_its_run_is_refused_by_the_one_look_before_it_is_read(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere.ckpt"
    torch.save({"global_step": 1, "state_dict": {}, "pytorch-lightning_version": "2.6.6"}, elsewhere)
    link = tmp_path / "runs" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    read: list[str] = []
    monkeypatch.setattr(checkpoint_facts, "read_header", lambda *a, **k: read.append("read"))
    with recorded() as route, pytest.raises(Exception, match="outside its run folder"):
        resolve_ckpt_path(subcommand(tmp_path / "runs", str(link)))
    assert read == [] and route.climbs == []
