"""The bounded reader of the text files lit_gpu reads from elsewhere: YAML, JSON, JSON lines, CSV, plain text.

Each reader returns plain data (never an object) or raises :class:`BadFileError`, one line naming the file,
what is wrong and the fix (exit 2). The parsing is the standard library's and PyYAML's; the :class:`Limits`
are checked around it: regular files only (a FIFO cannot hang a read), whole reads up to ``max_bytes``,
streamed ones a line of ``max_line`` at a time, strict decoding, nesting, YAML aliases' expanded size,
integers in ``[-2**63, 2**63)``, and no YAML tag outside the core schema (every YAML jsonargparse reads as
plain data is accepted).
"""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

# ---- the budget of a read, the one error, opening and decoding ----------------------------------
KiB, MiB = 1 << 10, 1 << 20
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Limits:
    """What one read may cost (``docs/checkpoints.md`` lists each kind's budget)."""

    max_bytes: int = 1 * MiB  # a file read whole (YAML, JSON, text); streamed kinds ignore it
    max_line: int = 1 * MiB  # one line of a streamed file (CSV, JSON lines)
    max_field: int = 128 * KiB  # characters in one CSV field (csv.field_size_limit)
    max_columns: int = 10_000  # fields in one CSV row
    max_depth: int = 64  # nesting of lists and mappings (JSON, YAML)
    max_nodes: int = 1_000_000  # values a YAML document expands to, each use of an alias counted
    encoding: str = "utf-8"  # strict: a byte that does not decode is an error


YAML_LIMITS = Limits(max_bytes=8 * MiB)  # config.yaml, hparams.yaml, a search space, --config files
JSON_LIMITS = Limits(max_bytes=1 * MiB)  # owner records, trial results, GPU leases, a parent's variables
JSON_LINES_LIMITS = Limits(max_line=4 * MiB, max_depth=32)  # a sweep journal, streamed
CSV_LIMITS = Limits(max_line=1 * MiB, max_field=128 * KiB, max_columns=10_000)  # metrics.csv, streamed
TEXT_LIMITS = Limits(max_bytes=1 * MiB)  # small plain-text files

FIX = "fix or remove that file"
READ_CHUNK = 64 * KiB  # bytes read at a time by a whole-file read
BAD_FILE = "{source}{where}: {problem}; {fix}"


class BadFileError(LitGpuError):
    """A file (or an environment variable) that is not what lit_gpu expects, in one line (``source``: the
    path or the variable's name; ``problem``: what is wrong, without the source)."""

    def __init__(self, source: object, problem: str, fix: str | None = None, line: int | None = None) -> None:
        self.source, self.problem = str(source), problem
        where = "" if line is None else f", line {line}"
        shown = messages.shown(self.source)
        super().__init__(BAD_FILE.format(source=shown, where=where, problem=problem, fix=fix or FIX))

    @classmethod
    def stated(cls, source: object, message: str) -> BadFileError:
        """The error with ``message`` as its whole line (a message that names the file and the fix)."""
        err = cls.__new__(cls)
        LitGpuError.__init__(err, message)
        err.source, err.problem = str(source), message
        return err


def open_regular(path: str | os.PathLike, fix: str | None = None) -> Any:
    """``path`` opened for binary reading when it is a regular file (never blocks on a FIFO); raises
    FileNotFoundError (callers decide), or BadFileError when unreadable or not a regular file."""
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
        at, byte = line if line is not None else data.count(b"\n", 0, err.start) + 1, data[err.start]
        raise BadFileError(source, f"byte {byte:#04x} is not {limits.encoding} text", fix, at) from None
    except LookupError as err:
        raise BadFileError(source, f"unknown encoding {limits.encoding!r}", fix) from err


def read_text(path: str | os.PathLike, limits: Limits = TEXT_LIMITS, *, fix: str | None = None) -> str:
    """A whole text file, at most ``limits.max_bytes``, decoded strictly."""
    return _decode(read_bytes(path, limits, fix), path, limits, fix)


def lines(
    path: str | os.PathLike, limits: Limits, *, fix: str | None = None, file: Any = None
) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line (its end kept; a last one without it too), streamed, each at most
    ``max_line`` bytes (``file``: ``path`` already opened for binary reading, closed here)."""
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


# ---- plain data: integers in range, nesting bounded, no cycle --------------------------------------
class _Bad(Exception):
    """Raised inside a parser hook; the reader turns it into a :class:`BadFileError`."""


def _checked_int(text: str) -> int:
    value = int(text) if len(text.lstrip("+-")) <= 19 else None
    if value is None or not INT_MIN <= value <= INT_MAX:
        raise _Bad(f"the integer {text[:24]} is out of range ({INT_RANGE})")
    return value


def _check_plain(value: Any, limits: Limits) -> None:
    """Nesting within ``max_depth``, no cycle (iterative; a shared value once); integers as PyYAML reads."""
    done: set[int] = set()  # containers fully checked (a value shared by two parents is checked once)
    open_: set[int] = set()  # containers on the current path: meeting one again is a cycle
    stack: list[tuple[Any, int, bool]] = [(value, 0, False)]
    while stack:
        item, depth, leaving = stack.pop()
        if leaving:
            open_.discard(id(item))
            done.add(id(item))
            continue
        if isinstance(item, dict | list | tuple | set | frozenset):
            if id(item) in open_:
                raise _Bad("a value contains itself (a recursive alias)")
            if id(item) in done:
                continue
            if depth >= limits.max_depth:
                raise _Bad(f"nested more than {limits.max_depth} levels deep")
            open_.add(id(item))
            stack.append((item, depth, True))
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else list(item)
            stack.extend((child, depth + 1, False) for child in children)


_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _json_depth_ok(text: str, max_depth: int) -> None:
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > max_depth:
                raise _Bad(f"nested more than {max_depth} levels deep")
        elif char in "]}":
            depth -= 1


def _no_constant(name: str) -> Any:
    raise _Bad(f"{name} is not a JSON value")


MAX_FLOAT_LITERAL = 64  # characters in one JSON number (a double needs ~25; longer ones only cost time)


def _any_float(text: str) -> float:
    """A JSON number with a fraction or exponent, at most :data:`MAX_FLOAT_LITERAL` characters."""
    if len(text) > MAX_FLOAT_LITERAL:
        raise _Bad(f"the number {text[:24]}... is longer than {MAX_FLOAT_LITERAL} characters")
    return float(text)


def _checked_float(text: str) -> float:
    """As :func:`_any_float`, and finite (``1e400`` would be infinity)."""
    if abs(value := _any_float(text)) == float("inf"):
        raise _Bad(f"the number {text} is out of range (it would be infinity)")
    return value


def parse_json(
    text: str, source: object, limits: Limits = JSON_LIMITS, *, fix: str | None = None,
    line: int | None = None, allow_nan: bool = False,
) -> Any:  # fmt: skip
    """``text`` (from ``source``: a path or ``$VARIABLE``) as plain JSON data within ``limits``."""
    if len(text) > limits.max_bytes:
        raise BadFileError(source, f"is longer than {limits.max_bytes} characters", fix, line)
    try:
        _json_depth_ok(text, limits.max_depth)
        floats, constants = (_any_float, float) if allow_nan else (_checked_float, _no_constant)
        return json.loads(text, parse_int=_checked_int, parse_float=floats, parse_constant=constants)
    except _Bad as err:
        raise BadFileError(source, str(err), fix, line) from None
    except json.JSONDecodeError as err:
        at = err.lineno if line is None else line
        raise BadFileError(source, f"not JSON ({err.msg}, column {err.colno})", fix, at) from None
    except (ValueError, RecursionError) as err:
        raise BadFileError(source, f"not JSON ({messages.first_line(err)})", fix, line) from None


def read_json(path: str | os.PathLike, limits: Limits = JSON_LIMITS, *, fix: str | None = None) -> Any:
    """A whole JSON file as plain data within ``limits``."""
    return parse_json(read_text(path, limits, fix=fix), path, limits, fix=fix)


def json_lines(
    path: str | os.PathLike, limits: Limits = JSON_LINES_LIMITS, *, fix: str | None = None,
    allow_nan: bool = True, complete_only: bool = True,
) -> Iterator[tuple[int, Any]]:  # fmt: skip
    """``(line number, value)`` of each line of a JSON-lines file, streamed; ``complete_only``: a last line
    without its newline (another process may be appending it) is skipped rather than parsed."""
    line_limits = replace(limits, max_bytes=limits.max_line)
    for number, text in lines(path, limits, fix=fix):
        if complete_only and not text.endswith("\n"):
            return
        if text.strip():
            yield number, parse_json(text, path, line_limits, fix=fix, line=number, allow_nan=allow_nan)


def _yaml_budget(text: str, source: object, limits: Limits, fix: str | None, loader: Any) -> None:
    """Depth and expanded size from PyYAML's event stream (iterative: no recursion, no objects)."""
    import yaml

    sizes: dict[str, int] = {}
    stack: list[list[Any]] = [[None, 0]]  # [anchor, expanded nodes so far]
    for event in yaml.parse(text, Loader=loader):
        if _tagged(event, getattr(loader, "plain_tags", CORE_SCHEMA_TAGS)):
            tag = f"the tag {_tag_name(event.tag)} is not allowed"
            raise BadFileError(source, f"{tag} ({NOT_PLAIN_TAG})", fix, _line(event))
        if isinstance(event, yaml.CollectionStartEvent):
            stack.append([event.anchor, 1])
            if len(stack) - 1 > limits.max_depth:
                raise BadFileError(
                    source, f"nested more than {limits.max_depth} levels deep", fix, _line(event)
                )
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
        elif isinstance(event, yaml.AliasEvent):
            if any(entry[0] == event.anchor for entry in stack):
                alias = f"the alias *{messages.shown(event.anchor, limit=40)} is inside its own anchor"
                raise BadFileError(source, f"{alias} (a value that contains itself)", fix, _line(event))
            anchor, size = None, sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            _sexagesimal_ok(event, source, fix, loader)
            anchor, size = event.anchor, 1
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        stack[-1][1] += size
        if stack[-1][1] > limits.max_nodes:
            problem = f"expands to more than {limits.max_nodes} values (aliases counted)"
            raise BadFileError(source, problem, fix, _line(event))


_INT_TAG = "tag:yaml.org,2002:int"
INT_RANGE = "at most 2**63 - 1 in size"
NOT_PLAIN_TAG = "it builds a type other than plain data; the core-schema tags !!str !!int !!float !!bool "
NOT_PLAIN_TAG += "!!null !!seq !!map are"


def _sexagesimal_ok(event: Any, source: object, fix: str | None, loader: Any) -> None:
    """A base-60 integer (YAML 1.1's ``190:20:30``; PyYAML builds it in quadratic time) within the bound
    Python puts on an integer read from text (``sys.get_int_max_str_digits()``), which PyYAML bypasses."""
    import yaml

    value = event.value
    limit = sys.get_int_max_str_digits() or 4300
    if len(value) <= limit or ":" not in value:
        return
    tag = event.tag
    if event.implicit[0]:  # a plain scalar: what the loader's resolvers make of it (jsonargparse's)
        tag = loader.resolve(loader, yaml.ScalarNode, value, event.implicit)
    if tag == _INT_TAG:
        long = f"the base-60 integer {value[:24]}... is longer than {limit} characters"
        raise BadFileError(source, f"{long} (out of range: {INT_RANGE})", fix, _line(event))


#: The explicit tags a config may carry: the YAML core schema's, which jsonargparse's loader (a PyYAML
#: SafeLoader) builds as plain data (``lr: !!float 1e-3``). Its other tags build other types (``!!set``,
#: ``!!binary``, ``!!timestamp``, ``!!omap``) and any other tag has no constructor there: refused, one line.
_CORE = ("str", "int", "float", "bool", "null", "seq", "map")
CORE_SCHEMA_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in _CORE)


def _tagged(event: Any, allowed: frozenset[str] = CORE_SCHEMA_TAGS) -> bool:
    """Whether ``event`` carries an explicit tag outside ``allowed`` (``!!set``, ``!!python/...``, ``!x``)."""
    tag = getattr(event, "tag", None)
    if tag is None or tag == "!" or tag in allowed:  # "!" alone: a quoted scalar is a string
        return False
    implicit = getattr(event, "implicit", True)
    return not (any(implicit) if isinstance(implicit, tuple) else implicit)


def _tag_name(tag: str) -> str:
    core = "tag:yaml.org,2002:"
    return messages.shown("!!" + tag.removeprefix(core) if tag.startswith(core) else tag, limit=60)


def _line(event: Any) -> int | None:
    mark = getattr(event, "start_mark", None)
    return None if mark is None else mark.line + 1


PYTHON_TUPLE = "tag:yaml.org,2002:python/tuple"


def hparams_loader() -> Any:
    """PyYAML's safe loader plus the one tag Lightning writes into a run's ``hparams.yaml``: a tuple
    hyper-parameter (``betas=(0.9, 0.999)``) as ``!!python/tuple``, read back as ``yaml.full_load`` does."""
    import yaml

    class HparamsLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        plain_tags = CORE_SCHEMA_TAGS | {PYTHON_TUPLE}

    HparamsLoader.add_constructor(PYTHON_TUPLE, lambda loader, node: tuple(loader.construct_sequence(node)))
    return HparamsLoader


def parse_yaml(
    text: str, source: object, limits: Limits = YAML_LIMITS, *, fix: str | None = None, loader: Any = None
) -> Any:
    """``text`` (from ``source``) as plain data within ``limits``: no tag but the core schema's, no object
    (``loader``: a SafeLoader subclass that resolves plain values its own way, as jsonargparse's does)."""
    import yaml

    loader = loader or getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    if len(text) > limits.max_bytes:
        raise BadFileError(source, f"is longer than {limits.max_bytes} characters", fix)
    try:
        _yaml_budget(text, source, limits, fix, loader)
        data = yaml.load(text, Loader=loader)  # noqa: S506 -- the safe loader
        _check_plain(data, limits)
        return data
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = messages.shown(err.problem or err.context or "not YAML", limit=120)
        at = None if mark is None else mark.line + 1
        raise BadFileError(source, f"YAML syntax error: {problem}", fix or "fix the YAML there", at) from None
    except _Bad as err:
        raise BadFileError(source, str(err), fix) from None
    except KeyError as err:  # SafeConstructor.construct_yaml_bool: a !!bool value it has no meaning for
        value = messages.shown(err.args[0] if err.args else "", limit=40)
        raise BadFileError(source, f"!!bool {value!r} is not a YAML boolean (true or false)", fix) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as err:
        if "integer string conversion" in str(err):
            raise BadFileError(source, f"an integer is out of range ({INT_RANGE})", fix) from None
        problem = messages.shown(messages.first_line(err), limit=120)
        raise BadFileError(source, f"not plain YAML ({problem})", fix) from None


def read_yaml(
    path: str | os.PathLike, limits: Limits = YAML_LIMITS, *, fix: str | None = None, loader: Any = None
) -> Any:
    """A whole YAML file as plain data within ``limits`` (``loader``: as in :func:`parse_yaml`)."""
    return parse_yaml(read_text(path, limits, fix=fix), path, limits, fix=fix, loader=loader)


METRICS_FIX = "move it aside or remove it (only the curves logged so far are in it)"


def csv_rows(
    path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None, file: Any = None
) -> Iterator[list[str]]:
    """Each row of a CSV file as a list of strings (the header first), streamed (``file``: as for lines)."""
    source = lines(path, limits, fix=fix, file=file)
    number = [0]  # the line being read, for the error
    reader = csv.reader(text for number[0], text in source)
    while True:
        old = csv.field_size_limit(limits.max_field)  # process-wide: set for each row, put back at once
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            why = f"not CSV ({messages.first_line(err)})"
            raise BadFileError(path, why, fix, number[0] or None) from None
        finally:
            csv.field_size_limit(old)
        if len(row) > limits.max_columns:
            raise BadFileError(path, f"a row has more than {limits.max_columns} fields", fix, number[0])
        yield row


def csv_dicts(
    path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None, file: Any = None
) -> tuple[list[str], Iterator[dict[str, str]]]:
    """The header of a CSV file and an iterator of its rows as ``{column: cell}`` (streamed; blank rows
    skipped, cells past the header dropped, missing cells ``""``)."""
    rows = csv_rows(path, limits, fix=fix, file=file)
    header = next(rows, [])
    padded = (row + [""] * (len(header) - len(row)) for row in rows if row)
    return header, (dict(zip(header, row, strict=False)) for row in padded)


def read_csv(
    path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None
) -> tuple[list[str], list[dict[str, str]]]:
    """The header and all rows of a CSV file (for files rewritten whole; prefer :func:`csv_dicts`)."""
    header, rows = csv_dicts(path, limits, fix=fix)
    return header, list(rows)


def csv_header(path: str | os.PathLike, limits: Limits = CSV_LIMITS, *, fix: str | None = None) -> list[str]:
    """The first row of a CSV file (``[]`` when empty)."""
    with closing(csv_rows(path, limits, fix=fix)) as rows:
        return next(rows, [])
