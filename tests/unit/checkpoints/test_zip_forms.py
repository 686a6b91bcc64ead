"""Zip forms an attacker may write around a checkpoint, and streams of cheap pickle opcodes (issue 46's
red team): each is one line (a refusal) or loads what was checked, and the check's own memory stays in
the budget.

Forms ``zipfile`` will not write are made byte by byte (:mod:`tests.helpers.zip_forms`).
"""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import torch

from lit_gpu.checkpoints import load_state_dict
from lit_gpu.checkpoints.read import BoundsError, CheckpointError, CheckpointLimits, check_buffer
from tests.helpers import checkpoint_bombs as bombs
from tests.helpers.zip_forms import Member, forged_zip

MiB = 2**20


@pytest.fixture(scope="module")
def saved() -> list[tuple[str, bytes]]:
    """The records of a small ``torch.save`` file, in its order."""
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def _members(saved: list[tuple[str, bytes]], **change) -> list[Member]:
    """The records, with ``change`` made to the directory entry of ``data/0`` (the tensor's)."""
    return [Member(name, data, **(change if name.endswith("data/0") else {})) for name, data in saved]


_TENSOR = 16  # data/0: four float32


@pytest.mark.parametrize(
    ("change", "entries", "refused"),
    [
        ({}, None, None),  # the control: torch.save's form, written by hand, loads
        ({"zip64": (_TENSOR, _TENSOR)}, None, None),  # a zip64 extra that agrees: what torch reads
        ({"local_extra": b"\x01\x00\x10\x00" + b"\xff" * 16}, None, None),  # only the local header's
        ({"zip64": (_TENSOR + 8, _TENSOR + 8)}, None, "overlap or leave gaps"),
        ({"zip64": (_TENSOR - 8, _TENSOR - 8)}, None, "overlap or leave gaps"),
        ({"zip64": (2**62, 2**62)}, None, "overlap or leave gaps"),
        ({"zip64": (_TENSOR - 8, _TENSOR)}, None, "is compressed"),  # sizes that differ: a compressed one
        ({"sizes": (_TENSOR - 8, _TENSOR - 8)}, None, "overlap or leave gaps"),
        ({}, 2, "counts 2 members but its directory lists"),
        ({}, 9, "counts 9 members but its directory lists"),
    ],
)
def test_zip64_extras_and_counts_that_disagree_are_one_line(saved, tmp_path, change, entries, refused):
    path = forged_zip(tmp_path / "forged.ckpt", _members(saved, **change), entries=entries)
    if refused is None:
        assert torch.equal(load_state_dict(path)["w"], torch.arange(4.0))
        return
    with pytest.raises(CheckpointError, match=refused) as err:
        load_state_dict(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("form", ["./data.pkl", "data.pkl/", "x/../data.pkl", "/data.pkl", ".\\data.pkl"])
@pytest.mark.parametrize("bomb_first", [False, True])
def test_a_bomb_under_another_spelling_of_data_pkl_is_never_what_torch_reads(
    saved, tmp_path, form, bomb_first
):
    """torch's reader finds ``archive/data.pkl`` by that exact name (ignoring case only): a record named
    ``archive/./data.pkl`` (or with a slash, a backslash, ``..``) is another record, never unpickled."""
    bomb = bombs._pickle(bombs._global("builtins", "bytearray") + bombs._int(2**31 - 1) + b"\x85R")
    twin = Member(f"archive/{form}", bomb)
    members = [Member(name, data) for name, data in saved]
    path = forged_zip(tmp_path / "twin.ckpt", [twin, *members] if bomb_first else [*members, twin])
    assert torch.equal(load_state_dict(path)["w"], torch.arange(4.0))


def _many_records(path: Path, count: int) -> bytes:
    pickled = bombs._pickle(b"N")
    members = {"data.pkl": pickled, "byteorder": b"little", "version": b"3\n"}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in [*members.items(), *((str(n), b"") for n in range(count))]:
            archive.writestr(zipfile.ZipInfo(f"archive/{name}"), data)
    return path.read_bytes()


def test_a_zip_of_many_empty_records_is_refused_before_they_are_listed(tmp_path):
    """20 000 empty records: a 2 MB file whose listing costs ~17 MB (Python's and torch's views); with a
    budget of 4 MiB + 2x the file the check refuses them from the directory's count, building nothing."""
    data = _many_records(tmp_path / "many.ckpt", 20_000)
    limits = CheckpointLimits(constant=4 * MiB)
    tracemalloc.start()
    try:
        with pytest.raises(BoundsError, match="20003 records; listing them would take more than"):
            check_buffer(data, limits, where="many", held=len(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MiB  # counted, not listed
    assert check_buffer(data, CheckpointLimits(constant=64 * MiB), where="many", held=len(data))  # room: read


def test_a_stream_of_cheap_pushes_is_refused_within_the_budget(tmp_path):
    """A million ``NONE`` opcodes (1 MB) push a million stack slots; the scan stops at the budget, not
    at STOP (it built ~3x the budget before)."""
    data = bombs.torch_zip(tmp_path / "pushes.ckpt", bombs._pickle(b"N" * 1_000_000)).read_bytes()
    limits = CheckpointLimits(constant=1 * MiB)
    budget = limits.budget(len(data))
    tracemalloc.start()
    try:
        with pytest.raises(BoundsError, match="the unpickler's stack"):
            check_buffer(data, limits, where="pushes", held=len(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < budget * 1.25, (peak, budget)


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        (
            b"(" * 100_000 + b"N",
            "marks|stack",
        ),  # open MARKs: a list each in the unpickler, charged while open
        (b"}" + b"r\x00\x00\x00\x00" * 100_000, "memo|stack"),  # LONG_BINPUT pressure: charged at each put
        (b"}q\x00" + b"h\x00" * 400_000, "stack"),  # BINGET pressure: a stack slot each
        (b"j\xff\xff\xff\x7f", "never stored"),  # LONG_BINGET of an index never put
        (b"}r\xff\xff\xff\xff", None),  # a huge memo index: one dict entry (torch's memo is a dict)
    ],
)
def test_mark_and_memo_pressure_is_charged_within_a_small_budget(tmp_path, body, refused):
    data = bombs.torch_zip(tmp_path / "memo.ckpt", bombs._pickle(body)).read_bytes()
    limits = CheckpointLimits(constant=1 * MiB)
    if refused is None:
        assert check_buffer(data, limits, where="memo", held=len(data)) < limits.budget(len(data))
        return
    with pytest.raises(BoundsError, match=refused):
        check_buffer(data, limits, where="memo", held=len(data))
