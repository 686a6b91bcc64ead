"""One read, one view: the bound checks the bytes ``torch.load`` reads, as torch's reader reads them."""

from __future__ import annotations

import io
import os

import pytest
import torch

from lit_gpu.checkpoints import load_state_dict, read_checkpoint
from lit_gpu.checkpoints import read as checkpoint
from lit_gpu.checkpoints.read import BoundsError, CheckpointError, check_buffer
from tests.helpers import checkpoint_bombs as bombs


@pytest.mark.parametrize("bomb_first", [True, False])
def test_members_whose_names_differ_only_in_case_are_refused_in_one_line(tmp_path, bomb_first):
    path = bombs.case_twins(tmp_path, bomb_first)
    with pytest.raises(CheckpointError, match="differ only in letter case") as err:
        load_state_dict(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_nul_byte_in_a_member_name_is_refused(tmp_path):
    path = bombs.nul_in_name(tmp_path)
    with pytest.raises(CheckpointError, match="NUL byte") as err:
        read_checkpoint(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("flag", [0x01, 0x40, 0x2000, 0x10])
def test_zip_flags_the_reader_does_not_support_are_refused(tmp_path, flag):
    path = bombs.flagged_member(tmp_path, flag & 0xFF) if flag < 0x100 else None
    if path is None:  # a flag of the second byte
        path = bombs.torch_zip(tmp_path / "f.ckpt", bombs._harmless_pickle())
        raw = bytearray(path.read_bytes())
        raw[7] |= flag >> 8
        raw[raw.find(b"PK\x01\x02") + 9] |= flag >> 8
        path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="zip flags") as err:
        read_checkpoint(path)
    assert "\n" not in str(err.value)


def test_a_file_replaced_after_the_check_changes_nothing_loaded(tmp_path, monkeypatch):
    good = tmp_path / "good.ckpt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, good)
    bomb = bombs.bytearray_of_a_size(tmp_path)
    checked = checkpoint.check_buffer

    def replace_after_checking(data, *args, **kwargs):
        used = checked(data, *args, **kwargs)
        os.replace(bomb, good)  # an atomic rename between the check and the load
        return used

    monkeypatch.setattr(checkpoint, "check_buffer", replace_after_checking)
    loaded = read_checkpoint(good)
    assert torch.equal(loaded["state_dict"]["w"], torch.ones(3))
    assert good.read_bytes() != b"" and good.stat().st_size < 2000  # the bomb is there now


def test_torch_load_reads_the_checked_bytes_not_the_path(tmp_path, monkeypatch):
    path = tmp_path / "w.ckpt"
    torch.save({"w": torch.zeros(2)}, path)
    seen = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **k: seen.append(f) or real(f, *a, **k))
    read_checkpoint(path)
    assert len(seen) == 1 and isinstance(seen[0], io.BytesIO)


def _view(numel_exposed: int) -> bytes:
    buffer = io.BytesIO()
    torch.save({"v": torch.zeros(1).expand(numel_exposed)}, buffer)
    return buffer.getvalue()


def test_a_view_is_charged_the_elements_it_exposes():
    small, larger = check_buffer(_view(1), where="a"), check_buffer(_view(4000), where="b")
    assert larger - small >= 4 * 3999 - 64  # the exposed elements beyond the one stored
    with pytest.raises(BoundsError, match="exposes 256.0 MiB from a storage of 4 B"):
        check_buffer(_view(2**26), where="c")


def test_the_file_read_into_memory_is_charged_within_the_same_budget(tmp_path):
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2**20)}, buffer)
    data = buffer.getvalue()
    assert check_buffer(data, where="x", held=len(data)) - check_buffer(data, where="x") == len(data)
