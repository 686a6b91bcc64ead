"""Checkpoint bombs under a memory limit: every loading path stays within baseline + budget.

Each case runs in a forked child whose address space is capped (``RLIMIT_AS``) at what it uses now
plus the file's budget (``CheckpointLimits().budget(size)``: the documented constant + 2x the size)
plus a small slack. The control shows each bomb is real: a bare ``torch.load(weights_only=True)``
runs out of memory under the same cap. lit_gpu's paths (``read_checkpoint``, ``load_state_dict``,
``load_lightning_module``, ``lit-gpu export``, ``lit-gpu test --ckpt_path``) end in one line instead,
and a normal checkpoint still loads under the cap.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import checkpoint_bombs as bombs
from tests.helpers.memory_cap import capped
from tests.helpers.paths import CONFIGS

pytestmark = pytest.mark.integration

MEMORY_BOMBS = [
    "bytearray of a size",
    "storage class called",
    "view past its storage, converted",
    "memo copies",
    "compressed data.pkl",
    "compressed tensor record",
    "overlapping zip members",
]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    return {name: bombs.BOMBS[name](folder) for name in MEMORY_BOMBS}


#: the control's bare torch.load inflates this one for ~15 s: the full tier's (the other six: the sample)
FULL_ONLY = ("compressed data.pkl",)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.full) if n in FULL_ONLY else n for n in MEMORY_BOMBS]
)
def test_a_bare_torch_load_runs_out_but_lit_gpu_refuses_in_one_line(name, made):
    from lit_gpu.checkpoints import load_state_dict

    path = made[name]
    size = path.stat().st_size
    control = capped(size, lambda: torch.load(path, weights_only=True, map_location="cpu"))
    assert control["outcome"] == "MemoryError", control
    guarded = capped(size, lambda: load_state_dict(path))
    assert guarded["outcome"] == "CheckpointError", guarded
    assert "\n" not in guarded["value"] and str(path) in guarded["value"]


def test_a_normal_checkpoint_loads_under_the_same_cap(tmp_path):
    from lit_gpu.checkpoints import load_state_dict, read_checkpoint
    from lit_gpu.checkpoints.read import read_header

    path = bombs.normal_checkpoint(tmp_path, tensors=16, numel=2**20)  # 64 MiB of weights
    size = path.stat().st_size
    for job in (lambda: read_checkpoint(path), lambda: load_state_dict(path), lambda: read_header(path)):
        assert capped(size, job)["outcome"] == "returned"


def _one_line(result: dict[str, str]) -> str:
    assert result["outcome"] == "exit 2", result
    lines = [line for line in result["stderr"].splitlines() if line.startswith("lit-gpu: error: ")]
    assert len(lines) == 1, result["stderr"][-2000:]
    return lines[0]


@pytest.mark.parametrize("name", ["bytearray of a size", "compressed tensor record", "memo copies"])
def test_cli_export_and_test_end_in_one_line_under_the_cap(name, made, tmp_path, monkeypatch):
    from lit_gpu.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    path = made[name]
    size = path.stat().st_size
    line = _one_line(capped(size, lambda: main(["export", str(path), "--out", str(tmp_path / "m.pt")])))
    assert str(path) in line and not (tmp_path / "m.pt").exists()
    simple = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    line = _one_line(capped(size, lambda: main(["test", *simple, "--ckpt_path", str(path)])))
    assert str(path) in line


def test_load_lightning_module_is_bounded_too(made):
    from lit_gpu.checkpoints import load_lightning_module
    from lit_gpu.modules import RegressionModule

    path = made["bytearray of a size"]
    result = capped(path.stat().st_size, lambda: load_lightning_module(RegressionModule, path))
    assert result["outcome"] == "CheckpointError" and "bytearray" in result["value"], result


def test_export_refuses_a_net_spec_far_larger_than_the_files_weights(tmp_path, monkeypatch):
    from lit_gpu.cli import main

    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    spec = {"class_path": "torch.nn.Linear", "init_args": {"in_features": 100_000, "out_features": 100_000}}
    path = tmp_path / "net.ckpt"
    torch.save(
        {"state_dict": {"net.weight": torch.zeros(1)}, "lit_gpu_net": spec, "pytorch-lightning_version": "2"},
        path,
    )
    line = _one_line(
        capped(path.stat().st_size, lambda: main(["export", str(path), "--out", str(tmp_path / "m.pt")]))
    )
    assert "38147.4 MiB of weights" in line and not (tmp_path / "m.pt").exists()


def test_load_lightning_module_refuses_hparams_naming_a_net_far_larger_than_the_file(tmp_path):
    from lit_gpu.checkpoints import CheckpointMismatchError, load_lightning_module
    from lit_gpu.modules import RegressionModule

    net = {"class_path": "torch.nn.Linear", "init_args": {"in_features": 100_000, "out_features": 100_000}}
    hparams = {"_instantiator": "lightning.pytorch.cli.instantiate_module", "net": net}
    path = tmp_path / "net.ckpt"
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": {}, "hyper_parameters": hparams}, path)
    result = capped(path.stat().st_size, lambda: load_lightning_module(RegressionModule, path))
    assert result["outcome"] == CheckpointMismatchError.__name__, result
    assert "38147.4 MiB of weights" in result["value"] and str(path) in result["value"]


@pytest.mark.parametrize("name", ["shared lists", "complex of a 2000-bit int", "device with a str index"])
def test_cli_export_of_shared_lists_or_rejected_calls_ends_in_one_line(name, tmp_path, monkeypatch):
    from lit_gpu.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    path = bombs.BOMBS[name](tmp_path) if name in bombs.BOMBS else bombs.rejected_call(tmp_path, name)
    line = _one_line(capped(path.stat().st_size, lambda: main(["export", str(path), "--out", "m.pt"])))
    assert str(path) in line and not (tmp_path / "m.pt").exists()


def test_load_lightning_module_of_shared_lists_ends_in_one_line(tmp_path):
    from lit_gpu.checkpoints import load_lightning_module
    from lit_gpu.modules import RegressionModule

    path = bombs.shared_lists(tmp_path)
    result = capped(path.stat().st_size, lambda: load_lightning_module(RegressionModule, path))
    assert result["outcome"] == "CheckpointError" and "counted each time" in result["value"], result


@pytest.mark.parametrize("case", ["case twins, bomb first", "case twins, bomb second", "NUL in a name"])
def test_archives_two_readers_read_differently_end_in_one_line_under_the_cap(case, tmp_path):
    from lit_gpu.checkpoints import load_state_dict

    if case.startswith("case"):
        path = bombs.case_twins(tmp_path, case.endswith("first"))
    else:
        path = bombs.nul_in_name(tmp_path)
    guarded = capped(path.stat().st_size, lambda: load_state_dict(path))
    assert guarded["outcome"] == "CheckpointError", guarded
    assert "\n" not in guarded["value"] and str(path) in guarded["value"]
