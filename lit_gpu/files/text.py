"""The one door for the text files lit_gpu reads: YAML, JSON, JSON lines, CSV and plain text.

Each reader takes a path (or, for text already in memory such as an environment variable, the text
and the name of where it came from) and :class:`Limits`, and returns plain data or raises
:class:`BadFileError`: one line naming the file, what is wrong and what to do (``lit-gpu: error: ...``,
exit 2). The parsing is the standard library's and PyYAML's own (``csv`` with ``csv.field_size_limit``,
``json`` with a nesting check before it runs, ``yaml``'s safe loader after an event pass that counts
depth and aliases); the budgets are checked around them:

* only regular files are opened (a FIFO or a device named ``metrics.csv`` cannot hang or flood a read);
* whole-file reads stop at ``max_bytes``; streamed files (CSV, JSON lines) are read one line at a time,
  each line at most ``max_line`` bytes, so a metrics file of a long run is never held whole;
* text must decode in ``encoding`` (UTF-8 by default); the error names the line;
* nesting is at most ``max_depth`` deep, YAML aliases expand to at most ``max_nodes`` nodes, and every
  integer lies in ``[-2**63, 2**63)``.

The budgets of each kind are constants of :mod:`lit_gpu.files.budget` (``docs/checkpoints.md`` lists them),
which also opens and decodes; the YAML and JSON readers are :mod:`lit_gpu.files.yaml_json`; this room reads
CSV and is where every reader is imported from.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from typing import Any

from lit_gpu import messages
from lit_gpu.files.budget import (
    CSV_LIMITS,
    FIX,
    JSON_LIMITS,
    JSON_LINES_LIMITS,
    READ_CHUNK,
    TEXT_LIMITS,
    YAML_LIMITS,
    BadFileError,
    Limits,
    lines,
    open_regular,
    read_bytes,
    read_text,
)
from lit_gpu.files.yaml_json import json_lines, parse_json, parse_yaml, read_json, read_yaml

METRICS_FIX = "move it aside or remove it (only the curves logged so far are in it)"


# ---- CSV ----------------------------------------------------------------------------------------
def csv_rows(
    path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None, file: Any = None
) -> Iterator[list[str]]:
    """Each row of a CSV file as a list of strings (the header first), streamed within ``limits``
    (``file``: see :func:`lit_gpu.files.budget.lines`)."""
    source = lines(path, limits, fix=fix, file=file)
    number = [0]

    def texts() -> Iterator[str]:
        for number[0], text in source:
            yield text

    reader = csv.reader(texts())
    while True:
        old = csv.field_size_limit(limits.max_field)  # process-wide: set for each row, put back at once
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise BadFileError(
                path, f"not CSV ({messages.first_line(err)})", fix, number[0] or None
            ) from None
        finally:
            csv.field_size_limit(old)
        if len(row) > limits.max_columns:
            raise BadFileError(path, f"a row has more than {limits.max_columns} fields", fix, number[0])
        yield row


def csv_dicts(
    path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None, file: Any = None
) -> tuple[list[str], Iterator[dict[str, str]]]:
    """The header of a CSV file and an iterator of its rows as ``{column: cell}`` (streamed).

    Blank rows are skipped; cells past the header are dropped; missing cells are ``""``.
    """
    rows = csv_rows(path, limits, fix=fix, file=file)
    header = next(rows, [])

    def dicts() -> Iterator[dict[str, str]]:
        for row in rows:
            if row:
                yield dict(zip(header, row + [""] * (len(header) - len(row)), strict=False))

    return header, dicts()


def read_csv(
    path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None
) -> tuple[list[str], list[dict[str, str]]]:
    """The header and all rows of a CSV file (for files rewritten whole; prefer :func:`csv_dicts`)."""
    header, rows = csv_dicts(path, limits, fix=fix)
    return header, list(rows)


def csv_header(path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None) -> list[str]:
    """The first row of a CSV file (``[]`` when empty)."""
    rows = csv_rows(path, limits, fix=fix)
    try:
        return next(rows, [])
    finally:
        rows.close()


__all__ = [
    "FIX",
    "READ_CHUNK",
    "METRICS_FIX",
    "CSV_LIMITS",
    "JSON_LIMITS",
    "JSON_LINES_LIMITS",
    "TEXT_LIMITS",
    "YAML_LIMITS",
    "BadFileError",
    "Limits",
    "csv_dicts",
    "csv_header",
    "csv_rows",
    "json_lines",
    "lines",
    "open_regular",
    "parse_json",
    "parse_yaml",
    "read_bytes",
    "read_csv",
    "read_json",
    "read_text",
    "read_yaml",
]
