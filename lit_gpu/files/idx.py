"""IDX files (MNIST's format): the header checked against the file's size before torchvision reads it.

An IDX file is a 4-byte magic (two zero bytes, a type code, the number of dimensions), one big-endian
``uint32`` per dimension, then the items. :func:`idx_problem` says why a file cannot be read whole (not
IDX, truncated, too big) and :func:`idx_shape` returns its dimensions; both open regular files only.
"""

from __future__ import annotations

import os
from pathlib import Path

from lit_gpu import messages
from lit_gpu.files.text import BadFileError, open_regular

ITEM_SIZE = {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}  # IDX type code -> bytes
MAX_DIMS = 4
MAX_IDX_BYTES = 16 << 30  # 16 GiB: far above any IDX data set; a header claiming more is not one
IDX_FIX = "delete it and download MNIST again (--data.download true) or copy the real file there"
PAIR_MISMATCH = (
    "{labels} holds {n_labels} labels but {images} holds {n_images} images; "
    "the two files are of different sets: download both again (or delete them and set --data.download true)"
)


def idx_shape(path: str | os.PathLike) -> tuple[int, ...]:
    """The dimensions an IDX file's header states, after checking the file has exactly their size.

    Raises:
        BadFileError: Not a regular file, not IDX, or its size differs from its header's.
    """
    path = Path(path)
    shown = messages.shown(path)
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        header = f.read(4)
        ok = (
            len(header) == 4
            and header[:2] == b"\0\0"
            and header[2] in ITEM_SIZE
            and 1 <= header[3] <= MAX_DIMS
        )
        dims_bytes = f.read(4 * header[3]) if ok else b""
    if not ok or len(dims_bytes) < 4 * header[3]:
        magic = int.from_bytes(header.ljust(4, b"\0"), "big")
        if ok:
            expected = 4 + 4 * header[3]
            raise BadFileError.stated(
                path, messages.TRUNCATED_IDX_FILE.format(path=shown, size=size, expected=expected)
            )
        raise BadFileError.stated(path, messages.NOT_AN_IDX_FILE.format(path=shown, magic=magic))
    dims = tuple(int.from_bytes(dims_bytes[i : i + 4], "big") for i in range(0, len(dims_bytes), 4))
    count = 1
    for dim in dims:
        count *= dim
    expected = 4 + 4 * header[3] + count * ITEM_SIZE[header[2]]
    if size != expected:
        raise BadFileError.stated(
            path, messages.TRUNCATED_IDX_FILE.format(path=shown, size=size, expected=expected)
        )
    if size > MAX_IDX_BYTES:
        raise BadFileError(path, f"is larger than {MAX_IDX_BYTES} bytes, more than an IDX data set", IDX_FIX)
    return dims


def idx_problem(path: str | os.PathLike) -> str | None:
    """Why an IDX file cannot be read (its one-line message), or ``None`` when its header fits its size."""
    try:
        idx_shape(path)
    except BadFileError as err:
        return str(err)
    return None


def check_idx_pair(images: str | os.PathLike, labels: str | os.PathLike) -> int:
    """The number of samples of an images file and its labels file; one line when either is broken or
    they hold different counts (a labels file shorter than its images)."""
    n_images, n_labels = idx_shape(images)[0], idx_shape(labels)[0]
    if n_images != n_labels:
        raise BadFileError.stated(
            labels,
            PAIR_MISMATCH.format(
                labels=messages.shown(labels),
                n_labels=n_labels,
                images=messages.shown(images),
                n_images=n_images,
            ),
        )
    return n_images
