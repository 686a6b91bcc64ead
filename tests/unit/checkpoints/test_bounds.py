"""The size bound of checkpoint reading: an attacker's suite against :mod:`lit_gpu.checkpoints.read`.

Every bomb is generated here (``tests/helpers/checkpoint_bombs.py``), none is checked in. Each must be
refused by the scan alone, in one line, before ``torch.load`` runs; normal files must pass with their
cost inside the budget. ``tests/integration/test_checkpoint_bombs.py`` runs the loading paths under
``RLIMIT_AS``.
"""

from __future__ import annotations

import collections
import io
import os

import pytest
import torch

from lit_gpu.checkpoints import CheckpointError, load_state_dict, read_checkpoint
from lit_gpu.checkpoints.read import BoundsError, CheckpointLimits, check_bounds
from tests.helpers import checkpoint_bombs as bombs

FAST = {k: v for k, v in bombs.BOMBS.items() if not k.startswith("compressed")}


@pytest.mark.parametrize("name", sorted(FAST))
def test_every_bomb_is_refused_in_one_line_before_torch_load(name, tmp_path, monkeypatch):
    path = FAST[name](tmp_path)

    def never(*args, **kwargs):
        raise AssertionError("torch.load ran on a bomb")

    monkeypatch.setattr(torch, "load", never)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message


def test_the_scan_alone_refuses_each_bomb_with_its_reason(tmp_path):
    reasons = {
        "bytearray of a size": "a bytearray of 2.0 GiB",
        "storage class called": "calls torch.storage.UntypedStorage",
        "storage larger than its record": "names 2147483648 bytes but its record holds 4",
        "view past its storage, converted": "exposes 4.0 GiB from a storage of 4 B",
        "memo copies": "(bytes)",
        "overlapping zip members": "overlap or leave gaps",
        "deep nesting": "nest more than 100 deep",
        "self-containing list": "holds itself",
        "colliding dict keys": "below 2**60",
        "huge int as a size": "negative or huge entry",
        "legacy pickle": "end record",
        "shared lists": "counted each time",
    }
    assert set(reasons) == set(FAST)
    for name, reason in reasons.items():
        with pytest.raises(
            BoundsError, match=reason.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")
        ):
            check_bounds(FAST[name](tmp_path))


def test_compressed_members_are_refused_without_inflating(tmp_path):
    path = bombs.torch_zip(tmp_path / "c.ckpt", b"\x80\x02N.", compress=("data.pkl",))
    with pytest.raises(BoundsError, match="'archive/data.pkl' is compressed"):
        check_bounds(path)


def test_a_file_torch_save_wrote_passes_within_its_budget(tmp_path):
    sd = collections.OrderedDict(a=torch.ones(3), b=torch.nn.Parameter(torch.zeros(2, 2)))
    sd._metadata = {"": {"version": 1}}
    checkpoint = {
        "state_dict": sd,
        "bytes": b"abc",
        "set": {1, 2},
        "dtype": torch.float16,
        "complex": 1 + 2j,
        "bytearray": bytearray(b"xy"),
        "big": 2**70,
        "device": torch.device("cpu"),
        "size": torch.Size([2, 3]),
        "float8": torch.zeros(4, dtype=torch.float8_e4m3fn),
        "view": torch.arange(12.0).reshape(3, 4)[:, 1:].t(),
        "expanded": torch.zeros(1).expand(100),
        "shared": [sd["a"], sd["a"]],
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0)}},
            "param_groups": [{"lr": 0.1, "params": [0]}],
        },
    }
    path = tmp_path / "ok.ckpt"
    torch.save(checkpoint, path)
    used = check_bounds(path)
    assert 0 < used <= CheckpointLimits().budget(os.path.getsize(path))
    loaded = read_checkpoint(path)
    assert torch.equal(loaded["view"], checkpoint["view"]) and loaded["set"] == {1, 2}
    normal = bombs.normal_checkpoint(tmp_path)
    assert (
        os.path.getsize(normal) <= check_bounds(normal) <= CheckpointLimits().budget(os.path.getsize(normal))
    )


def test_the_budget_is_the_callers_to_set(tmp_path):
    path = bombs.normal_checkpoint(tmp_path, tensors=2, numel=2**10)
    with pytest.raises(CheckpointError, match="more than"):
        read_checkpoint(path, limits=CheckpointLimits(constant=0, factor=1.0))
    with pytest.raises(CheckpointError, match="opcodes"):
        read_checkpoint(path, limits=CheckpointLimits(max_opcodes=10))
    assert set(read_checkpoint(path, limits=CheckpointLimits())["state_dict"]) == {
        "net.layer0.weight",
        "net.layer1.weight",
    }


def test_file_objects_and_streams_are_bounded_too(tmp_path):
    bomb = bombs.bytearray_of_a_size(tmp_path).read_bytes()

    class Stream(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self.data = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            return self.data.readinto(buffer)

    for source in (io.BytesIO(bomb), Stream(bomb)):
        with pytest.raises(CheckpointError, match="bytearray"):
            read_checkpoint(source)
    good = io.BytesIO(bombs.normal_checkpoint(tmp_path, tensors=1, numel=4).read_bytes())
    assert set(load_state_dict(good)) == {"net.layer0.weight"}


def test_tensors_must_lie_inside_their_storage(tmp_path):
    # 4 floats of storage seen as 3 x 2 with stride (2, 1): the last element is the 6th
    pickled = bombs._pickle(bombs._rebuild(bombs._storage("0", 4), (3, 2), (2, 1)))
    path = bombs.torch_zip(tmp_path / "past.ckpt", pickled, {"data/0": bytes(16)})
    with pytest.raises(BoundsError, match=r"reaches past its storage record \(16 bytes\)"):
        check_bounds(path)
    inside = bombs._pickle(bombs._rebuild(bombs._storage("0", 4), (2, 2), (2, 1)))
    path = bombs.torch_zip(tmp_path / "inside.ckpt", inside, {"data/0": bytes(16)})
    assert read_checkpoint(path).shape == (2, 2)


def test_pickled_objects_keep_the_pickle_refusal_and_trust_skips_the_scan(tmp_path):
    pickled = bombs._pickle(bombs._global("os", "system") + bombs._str("true") + b"\x85R")
    path = bombs.torch_zip(tmp_path / "evil.ckpt", pickled)
    with pytest.raises(CheckpointError, match="holds pickled Python objects.*trust=True"):
        read_checkpoint(path)
    legacy = tmp_path / "legacy.ckpt"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="legacy format.*trust=True"):
        read_checkpoint(legacy)
    assert torch.equal(read_checkpoint(legacy, trust=True)["w"], torch.ones(2))


@pytest.mark.parametrize("name", sorted(bombs.ARGUMENTS_TORCH_REJECTS))
def test_calls_whose_arguments_torch_rejects_are_refused_by_the_scan(name, tmp_path):
    path = bombs.rejected_call(tmp_path, name)
    with pytest.raises(Exception) as bare:  # the file is real: the weights-only reader raises on it
        torch.load(path, weights_only=True)
    assert not isinstance(bare.value, CheckpointError)
    with pytest.raises(BoundsError):
        check_bounds(path)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_the_values_torch_save_writes_for_those_calls_still_pass(tmp_path):
    values = {
        "bytes": bytearray(b"\x00\xffabc"),
        "empty": bytearray(),
        "complex": complex(1.5, -2.0),
        "devices": [torch.device("cpu"), torch.device("cuda", 1), torch.device("meta")],
        "meta": torch.empty(2, 3, device="meta"),
        "half": torch.zeros(4, dtype=torch.float16),
    }
    path = tmp_path / "values.ckpt"
    torch.save(values, path)
    check_bounds(path)
    loaded = read_checkpoint(path)
    assert loaded["bytes"] == values["bytes"] and loaded["complex"] == values["complex"]
    assert loaded["devices"] == values["devices"] and loaded["meta"].shape == (2, 3)


def test_any_error_torch_raises_on_a_checked_file_is_the_one_corrupt_line(tmp_path, monkeypatch):
    from lit_gpu.checkpoints import read as checkpoint

    path = bombs.rejected_call(tmp_path, "complex of a 2000-bit int")
    monkeypatch.setattr(checkpoint, "check_buffer", lambda *a, **k: 0)  # a case the scan would miss
    with pytest.raises(CheckpointError, match="corrupt or truncated") as info:
        read_checkpoint(path)
    assert isinstance(info.value.__cause__, OverflowError) and "\n" not in str(info.value)


def test_shared_containers_count_each_time_they_are_reached(tmp_path):
    for levels in (8, 13):  # 2**13 items: within max_nodes + the pickle's bytes
        path = bombs.torch_zip(
            tmp_path / f"dag{levels}.ckpt", b"\x80\x02" + bombs.shared_lists_pickle(levels) + b"."
        )
        check_bounds(path)
    path = bombs.torch_zip(tmp_path / "dag15.ckpt", b"\x80\x02" + bombs.shared_lists_pickle(15) + b".")
    with pytest.raises(BoundsError, match="counted each time"):
        check_bounds(path)
    with pytest.raises(BoundsError, match="counted each time"):  # the budget is the caller's
        check_bounds(tmp_path / "dag13.ckpt", CheckpointLimits(max_nodes=1000))
    shared = [1, 2, 3]  # what torch.save writes for one list named twice
    torch.save({"hyper_parameters": {"a": shared, "b": shared}}, tmp_path / "hp.ckpt")
    assert read_checkpoint(tmp_path / "hp.ckpt")["hyper_parameters"]["b"] == shared


def test_error_text_from_a_file_is_escaped(tmp_path):
    path = bombs.device_named(tmp_path, "cpu\x1b[2J\u202e\nlit-gpu: error: forged")
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    message = str(info.value)
    assert "\x1b" not in message and "\u202e" not in message and "\n" not in message
    assert "cpu\\x1b[2J" in message


def test_a_member_name_that_is_not_utf8_is_the_one_corrupt_line(tmp_path):
    """A zip whose central directory flags its names as UTF-8 but holds a byte that is not: the zip module
    raises UnicodeDecodeError while listing the members; every reader answers with the corrupt line."""
    import struct

    from lit_gpu.checkpoints.read import read_header

    path = tmp_path / "a.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "pytorch-lightning_version": "2.6.6"}, path)
    data = bytearray(path.read_bytes())
    entry = data.find(b"PK\x01\x02")
    flags = struct.unpack("<H", data[entry + 8 : entry + 10])[0] | 0x800  # "names are UTF-8"
    data[entry + 8 : entry + 10] = struct.pack("<H", flags)
    data[entry + 46] = 0xFF  # the first byte of the first name
    path.write_bytes(bytes(data))
    for read in (read_header, read_checkpoint):
        with pytest.raises(CheckpointError, match="corrupt or truncated"):
            read(path)
