"""Small files that make an unbounded ``torch.load`` build far more than they hold, generated on demand.

Each ``BOMBS`` entry writes one file (a few KB to a few MB) into a folder and returns its path; none is
checked in. ``torch_zip`` writes a zip laid out as ``torch.save`` writes it around any ``data.pkl``.
Used by ``tests/unit/checkpoints/test_bounds.py``, ``tests/integration/test_checkpoint_bombs.py`` and
``benchmarks/load_bounds.py``.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch

GiB = 2**30


def torch_zip(
    path: Path, pickled: bytes, records: dict[str, bytes] | None = None, compress: tuple[str, ...] = ()
) -> Path:
    """A zip as ``torch.save`` lays it out (``archive/``, stored members) holding ``pickled`` as data.pkl."""
    members = {"data.pkl": pickled, "byteorder": b"little", **(records or {}), "version": b"3\n"}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            kind = zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED
            archive.writestr(zipfile.ZipInfo(f"archive/{name}"), data, compress_type=kind)
    return path


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _int(value: int) -> bytes:
    if 0 <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1


def _str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _storage(key: str, numel: int, kind: tuple[str, str] = ("torch", "FloatStorage")) -> bytes:
    """A persistent id ``('storage', FloatStorage, key, 'cpu', numel)`` + BINPERSID."""
    return b"(" + _str("storage") + _global(*kind) + _str(key) + _str("cpu") + _int(numel) + b"tQ"


def _rebuild(storage: bytes, size: tuple[int, ...], stride: tuple[int, ...]) -> bytes:
    """``_rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())``."""

    def tup(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(_int(v) for v in values) + b"t"

    hooks = _global("collections", "OrderedDict") + b")R"
    return (
        _global("torch._utils", "_rebuild_tensor_v2")
        + b"("
        + storage
        + _int(0)
        + tup(size)
        + tup(stride)
        + b"\x89"
        + hooks
        + b"tR"
    )


def _pickle(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


# ---- the bombs -------------------------------------------------------------------------------------
def bytearray_of_a_size(folder: Path) -> Path:
    """``bytearray(2**31 - 1)``: 2 GiB named by a 4-byte integer."""
    body = (
        b"]"
        + b"("
        + b"".join(_global("builtins", "bytearray") + _int(2**31 - 1) + b"\x85R" for _ in range(2))
        + b"e"
    )
    return torch_zip(folder / "bytearray.ckpt", _pickle(body))


def storage_class_called(folder: Path) -> Path:
    """``torch.UntypedStorage(2**31)``: a storage class called with a size."""
    body = _global("torch.storage", "UntypedStorage") + _int(3 * GiB) + b"\x85R"
    return torch_zip(folder / "storage_call.ckpt", _pickle(body))


def storage_larger_than_its_record(folder: Path) -> Path:
    """A tensor of 2**29 floats (2 GiB) whose record ``data/0`` holds 4 bytes."""
    numel = 2**29
    body = _rebuild(_storage("0", numel), (numel,), (1,))
    return torch_zip(folder / "short_record.ckpt", _pickle(body), {"data/0": b"\0" * 4})


def view_past_its_storage(folder: Path) -> Path:
    """A 1-float storage seen as 2**15 x 2**15 through stride 0, then converted to float64 (8 GiB)."""
    view = _rebuild(_storage("0", 1), (2**15, 2**15), (0, 0))
    body = (
        _global("torch._utils", "_rebuild_device_tensor_from_cpu_tensor")
        + b"("
        + view
        + _global("torch", "float64")
        + _str("cpu")
        + b"\x89tR"
    )
    return torch_zip(folder / "expanded.ckpt", _pickle(body), {"data/0": b"\0" * 4})


def memo_copies(folder: Path) -> Path:
    """One 1 MiB string, encoded into new bytes 4 000 times through the memo (4 GiB of copies)."""
    head = _global("_codecs", "encode") + b"q\x00" + _str("x" * 2**20) + b"q\x01" + _str("latin1") + b"q\x02"
    copy = b"h\x00h\x01h\x02\x86R"
    return torch_zip(folder / "memo_copies.ckpt", _pickle(b"](" + head + copy * 4000 + b"e"))


def _streamed(
    path: Path,
    pickled: bytes | None,
    member: str,
    chunk: bytes,
    chunks: int,
    ends: tuple[bytes, bytes] = (b"", b""),
) -> Path:
    """A torch-layout zip whose deflated ``member`` inflates to ``ends[0] + chunk * chunks + ends[1]``."""
    with zipfile.ZipFile(path, "w") as archive:
        if pickled is not None:
            archive.writestr(zipfile.ZipInfo("archive/data.pkl"), pickled)
        archive.writestr(zipfile.ZipInfo("archive/byteorder"), b"little")
        info = zipfile.ZipInfo(f"archive/{member}")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as f:
            f.write(ends[0])
            for _ in range(chunks):
                f.write(chunk)
            f.write(ends[1])
        archive.writestr(zipfile.ZipInfo("archive/version"), b"3\n")
    return path


def compressed_pickle(folder: Path) -> Path:
    """A deflated data.pkl that inflates to 64 MiB: a list of 2**26 Nones (512 MiB of pointers)."""
    return _streamed(
        folder / "compressed_pickle.ckpt", None, "data.pkl", b"N" * 2**20, 64, (b"\x80\x02](", b"e.")
    )


def compressed_record(folder: Path) -> Path:
    """A deflated tensor record ``data/0`` that inflates to 256 MiB (the pickle names it honestly)."""
    numel = 2**26
    body = b"}" + _str("w") + _rebuild(_storage("0", numel), (numel,), (1,)) + b"s"
    return _streamed(folder / "compressed_record.ckpt", _pickle(body), "data/0", bytes(2**20), 256)


def overlapping_members(folder: Path) -> Path:
    """1 000 storage records whose directory entries all point at the same 1 MiB of data."""
    numel = 2**18
    items = b"".join(_str(f"w{k}") + _rebuild(_storage(str(k), numel), (numel,), (1,)) for k in range(1000))
    path = folder / "overlapping.ckpt"
    buffer = io.BytesIO()
    names = [f"data/{k}" for k in range(1000)]
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("archive/data.pkl"), _pickle(b"}(" + items + b"u"))
        archive.writestr(zipfile.ZipInfo("archive/byteorder"), b"little")
        archive.writestr(zipfile.ZipInfo("archive/data/0"), bytes(4 * numel))
        for name in names[1:]:
            archive.writestr(zipfile.ZipInfo(f"archive/{name}"), b"")
        archive.writestr(zipfile.ZipInfo("archive/version"), b"3\n")
    raw = bytearray(buffer.getvalue())
    # point every data/k directory entry at data/0's local header, with data/0's sizes and CRC
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as archive:
        first = archive.getinfo("archive/data/0")
    start = raw.rfind(b"PK\x05\x06")
    cd_start = struct.unpack_from("<L", raw, start + 16)[0]
    offset = cd_start
    while raw[offset : offset + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<3H", raw, offset + 28)
        name = raw[offset + 46 : offset + 46 + name_len].decode()
        if name.startswith("archive/data/") and name != "archive/data/0":
            struct.pack_into("<3L", raw, offset + 16, first.CRC, first.compress_size, first.file_size)
            struct.pack_into("<L", raw, offset + 42, first.header_offset)
        offset += 46 + name_len + extra_len + comment_len
    path.write_bytes(bytes(raw))
    return path


def deep_nesting(folder: Path) -> Path:
    """Lists nested 200 000 deep: every recursive walk (repr, deepcopy, Lightning's) overflows."""
    n = 200_000
    return torch_zip(folder / "deep.ckpt", _pickle(b"]" * n + b"a" * (n - 1)))


def self_containing(folder: Path) -> Path:
    """A list that holds itself."""
    return torch_zip(folder / "cycle.ckpt", _pickle(b"]q\x00h\x00a"))


def colliding_keys(folder: Path) -> Path:
    """A dict of 30 000 integer keys that all hash alike (``k * (2**61 - 1)``): quadratic insertion."""
    modulus = 2**61 - 1
    items = b"".join(_int(k * modulus) + b"N" for k in range(1, 30_001))
    return torch_zip(folder / "collisions.ckpt", _pickle(b"}(" + items + b"u"))


def huge_int_size(folder: Path) -> Path:
    """A tensor size given as a 2 040-bit integer."""
    body = _global("torch", "Size") + b"(" + _int(2**2000) + b"t\x85R"
    return torch_zip(folder / "huge_int.ckpt", _pickle(body))


def legacy_pickle(folder: Path) -> Path:
    """A plain pickle (torch's pre-1.6 layout starts like one): its storages are sized by the file."""
    path = folder / "legacy.ckpt"
    path.write_bytes(pickle.dumps({"state_dict": {}}, protocol=2))
    return path


def _dict(*pairs: tuple[bytes, bytes]) -> bytes:
    return b"}(" + b"".join(key + value for key, value in pairs) + b"u"


def _call(module: str, name: str, *args: bytes) -> bytes:
    return _global(module, name) + b"(" + b"".join(args) + b"tR"


def shared_lists_pickle(levels: int) -> bytes:
    """Lists each holding the one below twice (``x = [x', x']``, one object by memo): ``2**levels`` items
    for a walk, in ``7 x levels`` bytes. Memo entry ``i`` is the list of level ``i``."""
    body = b"]"
    for i in range(levels):
        body = b"](" + body + b"q" + bytes([i]) + b"h" + bytes([i]) + b"e"
    return body


def shared_lists(folder: Path, levels: int = 24) -> Path:
    """A Lightning-like checkpoint (< 1 KB) whose hyper-parameters and ``lit_gpu_net`` hold shared lists:
    any walk that visits every path (export's build plan, the hyper-parameter check) doubles per level."""
    dag = shared_lists_pickle(levels)
    instantiator = _str("lightning.pytorch.cli.instantiate_module")
    net = _dict(
        (_str("class_path"), _str("torch.nn.Identity")),
        (_str("init_args"), _dict((_str("x"), b"h" + bytes([levels - 1])))),
    )
    checkpoint = _dict(
        (_str("pytorch-lightning_version"), _str("2.6.6")),
        (_str("state_dict"), b"}"),
        (_str("hyper_parameters"), _dict((_str("_instantiator"), instantiator), (_str("x"), dag))),
        (_str("lit_gpu_net"), net),
    )
    return torch_zip(folder / "shared_lists.ckpt", _pickle(checkpoint))


#: calls allowed by torch's weights-only unpickler whose arguments make it raise (TypeError,
#: OverflowError, KeyError, LookupError): torch.save never writes them
ARGUMENTS_TORCH_REJECTS: dict[str, bytes] = {
    "bytearray of a str without encoding": _call("builtins", "bytearray", _str("abc")),
    "bytearray of bytes with an encoding": _call(
        "builtins", "bytearray", _call("_codecs", "encode", _str("x"), _str("latin1")), _str("utf-8")
    ),
    "bytearray with an unknown encoding": _call("builtins", "bytearray", _str("abc"), _str("bogus")),
    "bytearray of a list of str": _call("builtins", "bytearray", b"](" + _str("a") + b"e"),
    "complex of a 2000-bit int": _call("builtins", "complex", _int(2**2000)),
    "device with a str index": _call("torch", "device", _str("cpu"), _str("0")),
    "unknown layout": _call("torch.serialization", "_get_layout", _str("nope")),
    "meta tensor of a storage type": _call(
        "torch._utils",
        "_rebuild_meta_tensor_no_storage",
        _global("torch", "FloatStorage"),
        b"(" + _int(2) + b"t",
        b"(" + _int(1) + b"t",
        b"\x89",
    ),
}


def rejected_call(folder: Path, name: str) -> Path:
    """A checkpoint ``{"state_dict": {}, "x": <the call ARGUMENTS_TORCH_REJECTS[name]>}``."""
    body = _dict((_str("state_dict"), b"}"), (_str("x"), ARGUMENTS_TORCH_REJECTS[name]))
    return torch_zip(folder / f"{name.replace(' ', '_')}.ckpt", _pickle(body))


def device_named(folder: Path, text: str) -> Path:
    """A checkpoint holding ``torch.device(text)``: torch's error message quotes ``text``."""
    body = _dict((_str("state_dict"), b"}"), (_str("x"), _call("torch", "device", _str(text))))
    return torch_zip(folder / "device.ckpt", _pickle(body))


BOMBS: dict[str, Callable[[Path], Path]] = {
    "bytearray of a size": bytearray_of_a_size,
    "storage class called": storage_class_called,
    "storage larger than its record": storage_larger_than_its_record,
    "view past its storage, converted": view_past_its_storage,
    "memo copies": memo_copies,
    "compressed data.pkl": compressed_pickle,
    "compressed tensor record": compressed_record,
    "overlapping zip members": overlapping_members,
    "deep nesting": deep_nesting,
    "self-containing list": self_containing,
    "colliding dict keys": colliding_keys,
    "huge int as a size": huge_int_size,
    "legacy pickle": legacy_pickle,
    "shared lists": shared_lists,
}


def normal_checkpoint(folder: Path, tensors: int = 8, numel: int = 2**16) -> Path:
    """A plain ``torch.save`` of a Lightning-like checkpoint (state_dict, optimizer, hyper-parameters)."""
    state = {f"net.layer{i}.weight": torch.randn(numel) for i in range(tensors)}
    checkpoint = {
        "epoch": 1,
        "global_step": 10,
        "pytorch-lightning_version": "2.6.6",
        "state_dict": state,
        "optimizer_states": [
            {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]}
        ],
        "hyper_parameters": {"lr": 0.1, "name": "x"},
    }
    path = folder / "normal.ckpt"
    torch.save(checkpoint, path)
    return path


# ---- archives torch's reader and Python's zipfile read differently ----------------------------------
def _harmless_pickle() -> bytes:
    buffer = io.BytesIO()
    torch.save({"state_dict": {}}, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return archive.read("archive/data.pkl")


def case_twins(folder: Path, bomb_first: bool) -> Path:
    """``data.pkl`` and ``DATA.PKL``: one harmless, one a 2 GiB ``bytearray``; torch's reader ignores case."""
    bomb = _pickle(_global("builtins", "bytearray") + _int(2**31 - 1) + b"\x85R")
    first, second = (bomb, _harmless_pickle()) if bomb_first else (_harmless_pickle(), bomb)
    return torch_zip(folder / f"twins{int(bomb_first)}.ckpt", first, {"DATA.PKL": second})


def _patched(path: Path, old: bytes, new: bytes) -> Path:
    raw = path.read_bytes()
    assert raw.count(old) == 2, "a name in the local header and in the directory"
    path.write_bytes(raw.replace(old, new))
    return path


def nul_in_name(folder: Path) -> Path:
    """A second data pickle whose name holds a NUL byte (``data.pkl\\0x``): a bomb behind a harmless one."""
    bomb = _pickle(_global("builtins", "bytearray") + _int(2**31 - 1) + b"\x85R")
    path = torch_zip(folder / "nul.ckpt", _harmless_pickle(), {"data.pklZx": bomb})
    return _patched(path, b"data.pklZx", b"data.pkl\0x")


def flagged_member(folder: Path, flag: int) -> Path:
    """A harmless checkpoint whose ``data.pkl`` has the zip flag ``flag`` (1: encrypted) in both headers."""
    path = torch_zip(folder / f"flag{flag}.ckpt", _harmless_pickle())
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as archive:
        info = archive.getinfo("archive/data.pkl")
    raw[info.header_offset + 6] |= flag  # the local header's flags
    central = raw.find(b"PK\x01\x02")  # the first directory entry: data.pkl's
    raw[central + 8] |= flag  # the directory entry's flags
    path.write_bytes(bytes(raw))
    return path
