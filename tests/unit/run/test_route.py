"""The route of ``--ckpt_path``, recorded as it runs: cli -> run -> the reader, no return, a file opened once.

Measured by :mod:`tests.helpers.route` (rooms: lit_gpu's packages; a re-entry: a call into a room already
left; a climb: a call from a lower layer into a higher one), from the CLI's own step after parsing
(``LitGpuCLI._lit_gpu_parsed``). docs/architecture.md, "The route of --ckpt_path", writes them down.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_gpu.checkpoints import read as checkpoint_facts
from lit_gpu.cli import lightning_cli
from lit_gpu.cli.lightning_cli import LitGpuCLI
from lit_gpu.run import folder, store
from lit_gpu.run.store import resolve_ckpt_path
from tests.helpers.route import recorded, room_of
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


#: the room of the checkpoint reader, and of the plain-text reader a run's config.yaml is read with
READER = room_of(store.inspect.__module__)
TEXT = room_of(store.read_yaml.__module__)


def _from_the_cli(config, monkeypatch):
    """The CLI's step after parsing, on ``config`` (the seed check after it is not the route's)."""
    monkeypatch.setattr(lightning_cli, "check_seed", lambda config: None)
    cli = SimpleNamespace(config=config, argv=[], _args_are_a_dict=False, resolution=None)
    LitGpuCLI._lit_gpu_parsed(cli)
    return cli.resolution


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
def test_a_file_goes_cli_run_reader_with_no_return_and_is_opened_once(tmp_path, monkeypatch, command):
    ckpt = _runs(tmp_path)[-1]
    looked = _counted(monkeypatch)
    config = subcommand(tmp_path, str(ckpt), command)
    with recorded() as route:
        resolution = _from_the_cli(config, monkeypatch)
    assert resolution is not None and resolution.path == str(ckpt) and resolution.header.step == 4
    assert resolution.data is not None  # the bytes the load reads: the file is not opened again
    assert route.entries == ["cli", "run", READER], route.describe()
    assert route.reentries == [] and route.climbs == [] and route.leaf_calls == []
    assert looked == [ckpt]  # one look at the file: the link, whether it is whole, its header, its kind

    with recorded() as handed_on:  # the resolution handed on: the folder the run writes into
        run_folder = folder.of_command(command, config[command], resolution)
    assert handed_on.stays[0] == "run" and len(handed_on.rooms) <= 3, handed_on.describe()
    assert handed_on.climbs == [] and handed_on.leaf_calls == []
    assert {entry.split(" -> ")[1].split()[0] for entry in handed_on.reentries} <= {READER}
    if command == "fit":
        assert run_folder.continues is not None and run_folder.continues.folder == ckpt.parent.parent
    else:
        assert run_folder.evaluates is not None and run_folder.evaluates.run == ckpt.parent.parent


def test_last_goes_cli_run_reader_each_file_opened_once_and_never_back(tmp_path, monkeypatch):
    made = _runs(tmp_path)
    looked = _counted(monkeypatch)
    with recorded() as route:
        resolution = _from_the_cli(subcommand(tmp_path, "last"), monkeypatch)
    assert resolution is not None and resolution.path == str(made[-1]) and resolution.data is not None
    newest = [path for path in made if path.parent.parent.name == "version_1"]
    # only the chosen run's files, each looked at once: the chosen one too (its bytes kept for the load)
    assert sorted(looked) == sorted(newest)
    assert route.entries[:2] == ["cli", "run"] and route.climbs == [] and route.leaf_calls == []
    assert set(route.rooms) == {"cli", "run", READER, TEXT}, route.describe()
    # never back to the CLI or the store: the route goes down to the readers, once per file read (each
    # run's config.yaml, each checkpoint of the run taken), and comes back up once
    rooms_reentered = [entry.split(" -> ")[1].split()[0] for entry in route.reentries]
    assert set(rooms_reentered) <= {READER, TEXT}, route.reentries
    assert route.entries.count("cli") == 1 and route.entries.count("run") == 1, route.entries


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
