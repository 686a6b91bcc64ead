"""``CUDA_VISIBLE_DEVICES`` read as torch reads it: lit_gpu.devices against the installed torch's own
parser (``torch.cuda._parse_visible_devices``, ``_transform_uuid_to_ordinals``) on every combination of the
entries real clusters and users write."""

from __future__ import annotations

import itertools
import os
from unittest import mock

import pytest
import torch.cuda

from lit_gpu import devices

#: entries seen in real values (slurmd, nvidia-smi idioms, UUIDs, MIG) and the odd ones CUDA still reads
ENTRIES = ["0", "1", "3", "10", "-1", "", " 2", "+1", "1gpu2", "x", "NoDevFiles"] + [
    "GPU-8f1d",
    "GPU-8f",
    "MIG-2a",
]
VALUES = [",".join(combo) for n in (1, 2, 3) for combo in itertools.product(ENTRIES, repeat=n)]


def _torch_reads(value: str) -> list:
    with mock.patch.dict(os.environ, {"CUDA_VISIBLE_DEVICES": value}):
        return torch.cuda._parse_visible_devices()


def test_every_value_is_read_as_torch_reads_it():
    assert torch.version.hip is None  # the CUDA branch is the one mirrored
    different = [v for v in VALUES if devices.visible_entries(v) != _torch_reads(v)]
    assert different == [], different[:5]
    assert len(VALUES) > 2000


def test_unset_is_every_gpu():
    with mock.patch.dict(os.environ, clear=False) as env:
        env.pop("CUDA_VISIBLE_DEVICES", None)
        assert torch.cuda._parse_visible_devices() == list(range(64))  # torch: "all"
    assert devices.visible_entries(None) is None and not devices.hides_all(None)


@pytest.mark.parametrize(
    ("value", "listed"),
    [
        ("NoDevFiles", []),  # slurmd on a CPU-only job of a GPU cluster: no GPU
        ("0,1,", [0, 1]),  # nvidia-smi --query-gpu=index ... | tr '\n' ','
        ("", []),
        ("-1", []),
        ("GPU-8f1d2a3b-aaaa,GPU-77", ["GPU-8f1d2a3b-aaaa", "GPU-77"]),
        ("MIG-4b1f/1/0", ["MIG-4b1f/1/0"]),
        ("0,0", []),  # a repeat: CUDA shows nothing
    ],
)
def test_cluster_values_keep_cudas_meaning(value, listed):
    assert devices.visible_entries(value) == listed == _torch_reads(value)
    assert devices.hides_all(value) is (listed == [])


def test_uuid_prefixes_map_as_torch_maps_them():
    uuids = ["GPU-aa11", "GPU-aa22", "GPU-bb33"]
    for combo in itertools.product(
        ["GPU-aa", "GPU-aa1", "GPU-b", "GPU-bb33", "GPU-zz", "GPU-aa22"], repeat=3
    ):
        ours = devices.uuid_ordinals(list(combo), uuids)
        assert ours == torch.cuda._transform_uuid_to_ordinals(list(combo), uuids), combo


@pytest.mark.parametrize(
    ("value", "whole"),
    [
        ("0,1", True),
        ("0,1,", True),
        (" 0 , 1 ", True),
        ("NoDevFiles", True),
        ("", True),
        ("0;1", False),
        ("0,x,1", False),
        ("GPU-a,GPU-b", True),
        ("GPU-a,,GPU-b", False),
        ("0,0", False),
    ],
)
def test_read_whole_says_when_cuda_ignores_part_of_the_value(value, whole):
    assert devices.read_whole(value) is whole


def _torch_reading(value: str) -> list | str:
    try:
        return _torch_reads(value)
    except ValueError:
        return "ValueError"


#: digits str.isdigit takes and C's strtoul (CUDA's reading) does not: superscript, Arabic-Indic,
#: Devanagari, fullwidth; with the ASCII entries real values hold
UNICODE_ENTRIES = ["\u00b2", "\u0661", "\u0967", "\uff11", "0", "1", "", "x"]


@pytest.mark.parametrize(
    "value", [",".join(combo) for n in (1, 2) for combo in itertools.product(UNICODE_ENTRIES, repeat=n)]
)
def test_a_non_ascii_digit_is_flagged_exactly_where_torch_and_cuda_disagree(value):
    """torch's ``_strtoul`` takes any ``str.isdigit`` character (its ``int()`` raises on a superscript);
    CUDA's ``strtoul`` reads 0-9 only. :func:`entries` is CUDA's reading and never raises;
    :func:`torch_disagrees` names every value the two read differently, and only those."""
    cuda = devices.visible_entries(value)
    torch_reads = _torch_reading(value)
    assert cuda == devices.visible_entries(value.encode("ascii", "replace").decode().replace("?", "x"))
    disagree = devices.torch_disagrees(value)
    assert (disagree is not None) is (torch_reads != cuda), (value, torch_reads, cuda)
    if torch_reads == "ValueError":
        assert "raises ValueError" in disagree
    devices.read_whole(value)  # reporting never raises
    devices.hides_all(value)


def test_every_ascii_value_is_one_torch_and_cuda_agree_on():
    assert [v for v in VALUES if devices.torch_disagrees(v)] == []
