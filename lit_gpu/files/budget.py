"""The budget of a text read: :class:`Limits`, the one error (:class:`BadFileError`), and the reads.

Every reader of :mod:`lit_gpu.files.text` opens, reads and decodes through here: only regular files are
opened (a FIFO or a device named ``metrics.csv`` cannot hang or flood a read); whole-file reads stop at
``max_bytes``; streamed files are read one line at a time, each line at most ``max_line`` bytes; text
must decode in ``encoding`` (UTF-8 by default) and the error names the line. The budgets of each kind
of file are the constants below (``docs/checkpoints.md`` lists them).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

KiB, MiB = 1 << 10, 1 << 20
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Limits:
    """What one read may cost.

    Attributes:
        max_bytes: Size of a file read whole (YAML, JSON, text); streamed kinds ignore it.
        max_line: Bytes in one line of a streamed file (CSV, JSON lines).
        max_field: Characters in one CSV field (``csv.field_size_limit``).
        max_columns: Fields in one CSV row.
        max_depth: Nesting of lists and mappings (JSON, YAML).
        max_nodes: Values a YAML document expands to, aliases counted each time they are used.
        encoding: The text encoding (strict: a byte that does not decode is an error).
        int_bound: Integers (YAML) within ``[-int_bound - 1, int_bound]``; None: any Python reads from text.
    """

    max_bytes: int = 1 * MiB
    max_line: int = 1 * MiB
    max_field: int = 128 * KiB
    max_columns: int = 10_000
    max_depth: int = 64
    max_nodes: int = 1_000_000
    encoding: str = "utf-8"
    int_bound: int | None = INT_MAX


#: config.yaml, hparams.yaml, a search space, the user's --config files
YAML_LIMITS = Limits(max_bytes=8 * MiB, int_bound=None)  # integers: as jsonargparse and PyYAML read them
#: owner records, trial results, GPU leases, environment variables set by a parent lit-gpu
JSON_LIMITS = Limits(max_bytes=1 * MiB)
#: a sweep journal: streamed, one JSON value per line
JSON_LINES_LIMITS = Limits(max_line=4 * MiB, max_depth=32)
#: metrics.csv: streamed, any number of rows
CSV_LIMITS = Limits(max_line=1 * MiB, max_field=128 * KiB, max_columns=10_000)
#: small plain-text files (/proc entries, recipe lists)
TEXT_LIMITS = Limits(max_bytes=1 * MiB)

FIX = "fix or remove that file"
#: bytes read at a time by a whole-file read
READ_CHUNK = 64 * KiB
BAD_FILE = "{source}{where}: {problem}; {fix}"


class BadFileError(LitGpuError):
    """A file (or an environment variable) that is not what lit_gpu expects, in one line.

    Attributes:
        source: The path or the variable's name.
        problem: What is wrong, without the source.
    """

    def __init__(self, source: object, problem: str, fix: str | None = None, line: int | None = None) -> None:
        self.source = str(source)
        self.problem = problem
        where = "" if line is None else f", line {line}"
        super().__init__(
            BAD_FILE.format(source=messages.shown(self.source), where=where, problem=problem, fix=fix or FIX)
        )

    @classmethod
    def stated(cls, source: object, message: str) -> BadFileError:
        """The error with ``message`` as its whole line (a message that names the file and the fix)."""
        err = cls.__new__(cls)
        LitGpuError.__init__(err, message)
        err.source, err.problem = str(source), message
        return err


# ---- opening ------------------------------------------------------------------------------------
def open_regular(path: str | os.PathLike, fix: str | None = None) -> Any:
    """``path`` opened for binary reading when it is a regular file (never blocks on a FIFO).

    Raises:
        FileNotFoundError: No such file (callers decide whether that is an error).
        BadFileError: Unreadable, or not a regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as err:
        raise BadFileError(path, f"cannot be read ({err.strerror or messages.first_line(err)})", fix) from err
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadFileError(path, "is not a regular file", fix)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, limits: Limits, fix: str | None = None) -> bytes:
    """The whole of ``path``, at most ``limits.max_bytes``."""
    chunks: list[bytes] = []
    size = 0
    with open_regular(path, fix) as f:
        try:  # in chunks: a small file costs its size, not the budget (read(n) allocates n bytes first)
            while size <= limits.max_bytes:
                chunk = f.read(min(READ_CHUNK, limits.max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as err:
            raise BadFileError(path, f"cannot be read ({messages.first_line(err)})", fix) from err
    if size > limits.max_bytes:  # before joining: a file too big costs the budget once, not twice
        raise BadFileError(path, f"is larger than {limits.max_bytes} bytes, more than such a file holds", fix)
    return b"".join(chunks)


def _decode(data: bytes, source: object, limits: Limits, fix: str | None, line: int | None = None) -> str:
    try:
        return data.decode(limits.encoding)
    except UnicodeDecodeError as err:
        at = line if line is not None else data.count(b"\n", 0, err.start) + 1
        raise BadFileError(
            source, f"byte {data[err.start]:#04x} is not {limits.encoding} text", fix, at
        ) from None
    except LookupError as err:
        raise BadFileError(source, f"unknown encoding {limits.encoding!r}", fix) from err


def read_text(path: str | os.PathLike, limits: Limits = TEXT_LIMITS, *, fix: str | None = None) -> str:
    """A whole text file, at most ``limits.max_bytes``, decoded strictly."""
    return _decode(read_bytes(path, limits, fix), path, limits, fix)


def lines(
    path: str | os.PathLike, limits: Limits, *, fix: str | None = None, file: Any = None
) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line (its end kept), streamed; a line over ``max_line`` bytes is an
    error. A last line without its newline is yielded too (callers that append decide). ``file``: ``path``
    already opened for binary reading (checked by the caller; closed here)."""
    with file if file is not None else open_regular(path, fix) as f:
        number = 0
        while True:
            try:
                raw = f.readline(limits.max_line + 1)
            except OSError as err:
                raise BadFileError(path, f"cannot be read ({messages.first_line(err)})", fix) from err
            if not raw:
                return
            number += 1
            if len(raw) > limits.max_line:
                raise BadFileError(path, f"a line is longer than {limits.max_line} bytes", fix, number)
            yield number, _decode(raw, path, limits, fix, number)
