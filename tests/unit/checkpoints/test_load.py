"""lit_gpu.checkpoints: load anything anywhere, strip wrapper prefixes, report mismatches."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

from lit_gpu.checkpoints import (
    CheckpointError,
    CheckpointMismatchError,
    check_checkpoint_file,
    clean_keys,
    load_into,
    load_state_dict,
    net_spec,
)
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import FooNet, SimpleModel


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_clean_keys_strips_dp_ddp_compile_and_attr_prefixes():
    t = torch.zeros(1)
    assert list(clean_keys({"module.fc.weight": t, "module.fc.bias": t})) == ["fc.weight", "fc.bias"]
    assert list(clean_keys({"_orig_mod.fc.weight": t})) == ["fc.weight"]
    assert list(clean_keys({"net._orig_mod.fc.weight": t, "net._orig_mod.fc.bias": t})) == [
        "net.fc.weight",
        "net.fc.bias",
    ]
    assert list(clean_keys({"module._orig_mod.net.fc.weight": t}, strip=["net."])) == ["fc.weight"]
    # a real submodule called "module" next to other keys is not a wrapper: left alone
    assert list(clean_keys({"module.weight": t, "head.weight": t})) == ["module.weight", "head.weight"]


def test_lightning_checkpoint_loads_into_plain_net_and_back(tmp_path):
    module = RegressionModule(SimpleModel(4, 3))
    torch.save({"state_dict": module.state_dict(), "epoch": 1}, tmp_path / "m.ckpt")

    net = SimpleModel(4, 3)
    report = load_into(net, tmp_path / "m.ckpt")
    assert report.ok and sorted(report.loaded) == ["fc.bias", "fc.weight"]
    assert _same_weights(net, module.net)

    fresh = RegressionModule(SimpleModel(4, 3))
    torch.save(net.state_dict(), tmp_path / "plain.pt")
    load_into(fresh, tmp_path / "plain.pt")  # plain keys gain the "net." prefix
    assert _same_weights(fresh.net, module.net)


@pytest.mark.integration
def test_dataparallel_and_compiled_state_dicts_load(tmp_path):
    src = FooNet(5, 2)
    dp_state = nn.DataParallel(src).state_dict()  # CPU-only: wraps without GPUs, keys "module.*"
    assert all(k.startswith("module.") for k in dp_state)
    compiled_state = torch.compile(src).state_dict()  # no compilation until called
    assert all(k.startswith("_orig_mod.") for k in compiled_state)
    for state in (dp_state, compiled_state):
        torch.save(state, tmp_path / "w.pt")
        dst = FooNet(5, 2)
        load_into(dst, tmp_path / "w.pt")
        assert _same_weights(dst, src)


def test_mismatch_lists_missing_unexpected_and_shapes(tmp_path):
    torch.save(RegressionModule(SimpleModel(4, 3)).state_dict(), tmp_path / "simple.ckpt")
    with pytest.raises(CheckpointMismatchError) as info:
        load_into(SimpleModel(5, 3), tmp_path / "simple.ckpt")
    msg = str(info.value)
    assert "fc.weight: checkpoint (3, 4) vs model (3, 5)" in msg and "\n" not in msg

    with pytest.raises(CheckpointMismatchError) as info:
        load_into(FooNet(4, 2), tmp_path / "simple.ckpt")
    msg = str(info.value)
    assert "2 missing (linears.0.weight, linears.1.weight)" in msg
    assert "2 unexpected" in msg and "fc.weight" in msg

    net = SimpleModel(5, 3)
    before = net.fc.bias.clone()
    report = load_into(net, tmp_path / "simple.ckpt", strict=False)  # loads what fits: the bias
    assert report.loaded == ["fc.bias"] and list(report.shape_mismatches) == ["fc.weight"]
    assert not torch.equal(net.fc.bias, before)


class _Custom:  # a pickled object weights_only refuses
    pass


def test_weights_only_by_default_and_trust_opt_in(tmp_path):
    torch.save({"state_dict": SimpleModel(2, 2).state_dict(), "extra": _Custom()}, tmp_path / "p.ckpt")
    with pytest.raises(CheckpointError, match="trust=True"):
        load_state_dict(tmp_path / "p.ckpt")
    assert set(load_state_dict(tmp_path / "p.ckpt", trust=True)) == {"fc.weight", "fc.bias"}


def test_corrupt_truncated_and_empty_files_are_one_line_errors(tmp_path):
    good = tmp_path / "good.ckpt"
    torch.save({"state_dict": SimpleModel(8, 8).state_dict()}, good)
    data = good.read_bytes()
    (tmp_path / "trunc.ckpt").write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.ckpt").write_bytes(b"")
    (tmp_path / "text.ckpt").write_text("hello")
    for name, reason in [("trunc", "corrupt or truncated"), ("empty", "empty"), ("text", "corrupt")]:
        with pytest.raises(CheckpointError, match=reason) as info:
            load_state_dict(tmp_path / f"{name}.ckpt")
        assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="not found"):
        check_checkpoint_file(tmp_path / "missing.ckpt")


def test_cuda_saved_checkpoint_loads_on_cpu(tmp_path):
    """Storages tagged 'cuda:0' at save time (as on a GPU machine) load on CPU via map_location."""
    registry = torch.serialization._package_registry
    entry = (1, lambda obj: "cuda:0", lambda obj, location: None)
    registry.insert(0, entry)
    try:
        net = SimpleModel(3, 2)
        torch.save({"state_dict": RegressionModule(net).state_dict()}, tmp_path / "gpu.ckpt")
    finally:
        registry.remove(entry)
    raw = (tmp_path / "gpu.ckpt").read_bytes()
    assert b"cuda:0" in raw  # the file really claims CUDA storages
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(tmp_path / "gpu.ckpt", weights_only=True)  # what users hit without map_location
    dst = SimpleModel(3, 2)
    load_into(dst, tmp_path / "gpu.ckpt")  # map_location="cpu" by default
    assert dst.fc.weight.device.type == "cpu" and _same_weights(dst, net)
    meta = load_state_dict(tmp_path / "gpu.ckpt", map_location="meta")
    assert meta["net.fc.weight"].device.type == "meta"


def test_net_spec_outside_cli_reads_attributes_and_lit_module_saves_it():
    spec = net_spec(FooNet(7, 2))
    assert spec["class_path"] == "lit_gpu.nets.foonet.FooNet"
    checkpoint: dict = collections.OrderedDict()
    RegressionModule(SimpleModel(3, 3)).on_save_checkpoint(checkpoint)
    assert checkpoint["lit_gpu_net"]["class_path"].endswith("SimpleModel")


def test_a_directory_as_checkpoint_says_so_and_names_a_ckpt_inside(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    torch.save({"state_dict": {}}, tmp_path / "checkpoints" / "last.ckpt")
    with pytest.raises(
        CheckpointError, match=r"is a directory, not a checkpoint file; pass a \.ckpt file in it"
    ):
        check_checkpoint_file(tmp_path)
    with pytest.raises(CheckpointError) as info:
        check_checkpoint_file(tmp_path)
    assert str(tmp_path / "checkpoints" / "last.ckpt") in str(info.value)


def test_load_lightning_module_loads_the_very_bytes_it_checked(tmp_path, monkeypatch):
    from lit_gpu.checkpoints import build as build
    from lit_gpu.checkpoints import load_lightning_module

    module = RegressionModule(net=SimpleModel())
    state = {k: torch.full_like(v, 0.5) for k, v in module.state_dict().items()}
    path = tmp_path / "m.ckpt"
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": state, "hyper_parameters": {}}, path)
    real = build.check_hparams

    def check_then_swap(*args, **kwargs):
        real(*args, **kwargs)  # then another process replaces the file before Lightning reads it
        torch.save(
            {"state_dict": {k: torch.full_like(v, 7.0) for k, v in state.items()}, "x": nn.ReLU()}, path
        )

    monkeypatch.setattr(build, "check_hparams", check_then_swap)
    loaded = load_lightning_module(RegressionModule, path, net=SimpleModel())
    assert all(torch.equal(v, state[k]) for k, v in loaded.state_dict().items())


def test_mismatched_keys_from_a_file_are_listed_escaped():
    from lit_gpu.checkpoints.load import LoadReport

    forged = "w\x1b[2J\nlit-gpu: error: forged"
    summary = LoadReport(unexpected=[forged], missing=["fc.weight"]).summary()
    assert "\n" not in summary and "\x1b" not in summary and "w\\x1b[2J\\nlit-gpu" in summary
