"""Readers of nested plain data: YAML, JSON and JSON lines, within a :class:`~lit_gpu.files.budget.Limits`.

The parsing is the standard library's ``json`` (with a nesting check before it runs, integers within
``[-2**63, 2**63)``, finite numbers unless NaN is allowed) and PyYAML's safe loader (after an event pass
that counts depth and aliases and refuses every explicit tag but the YAML core schema's). What comes back
is plain data: dicts, lists, strings, numbers, booleans and ``None``, never an object. Read through
:mod:`lit_gpu.files.text`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from lit_gpu import messages
from lit_gpu.files.budget import (
    INT_MAX,
    INT_MIN,
    JSON_LIMITS,
    JSON_LINES_LIMITS,
    YAML_LIMITS,
    BadFileError,
    Limits,
    lines,
    read_text,
)

__all__ = ["hparams_loader", "json_lines", "parse_json", "parse_yaml", "read_json", "read_yaml"]


# ---- plain data checks --------------------------------------------------------------------------
class _Bad(Exception):
    """Raised inside a parser hook; turned into a :class:`BadFileError` by the reader."""


def _checked_int(text: str) -> int:
    digits = text.lstrip("+-")
    if len(digits) > 19:
        raise _Bad(f"the integer {text[:24]}... is out of range (at most 2**63 - 1 in size)")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise _Bad(f"the integer {text} is out of range (at most 2**63 - 1 in size)")
    return value


def _check_plain(value: Any, limits: Limits) -> None:
    """Every integer in range, nesting within ``max_depth``, no cycle (iterative; a shared value once)."""
    done: set[int] = set()  # containers fully checked (a value shared by two parents is checked once)
    open_: set[int] = set()  # containers on the current path: meeting one again is a cycle
    stack: list[tuple[Any, int, bool]] = [(value, 0, False)]
    while stack:
        item, depth, leaving = stack.pop()
        if leaving:
            open_.discard(id(item))
            done.add(id(item))
            continue
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            bound = limits.int_bound
            if bound is not None and not -bound - 1 <= item <= bound:
                raise _Bad(f"the integer {str(item)[:24]} is out of range (at most 2**63 - 1 in size)")
        elif isinstance(item, dict | list | tuple | set | frozenset):
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


# ---- JSON ---------------------------------------------------------------------------------------
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


#: characters in one JSON number literal (a double needs at most ~25; longer ones only cost time)
MAX_FLOAT_LITERAL = 64


def _checked_float(text: str) -> float:
    """A JSON number with a fraction or exponent: short and finite (``1e400`` would be infinity)."""
    if len(text) > MAX_FLOAT_LITERAL:
        raise _Bad(f"the number {text[:24]}... is longer than {MAX_FLOAT_LITERAL} characters")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Bad(f"the number {text} is out of range (it would be infinity)")
    return value


def _any_float(text: str) -> float:
    """As :func:`_checked_float` but infinity allowed (readers that take NaN and Infinity)."""
    if len(text) > MAX_FLOAT_LITERAL:
        raise _Bad(f"the number {text[:24]}... is longer than {MAX_FLOAT_LITERAL} characters")
    return float(text)


def parse_json(
    text: str,
    source: object,
    limits: Limits = JSON_LIMITS,
    *,
    fix: str | None = None,
    line: int | None = None,
    allow_nan: bool = False,
) -> Any:
    """``text`` (from ``source``: a path or ``$VARIABLE``) as plain JSON data within ``limits``."""
    if len(text) > limits.max_bytes:
        raise BadFileError(source, f"is longer than {limits.max_bytes} characters", fix, line)
    try:
        _json_depth_ok(text, limits.max_depth)
        return json.loads(
            text,
            parse_int=_checked_int,
            parse_float=_any_float if allow_nan else _checked_float,
            parse_constant=float if allow_nan else _no_constant,
        )
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
    path: str | os.PathLike,
    limits: Limits = JSON_LINES_LIMITS,
    *,
    fix: str | None = None,
    allow_nan: bool = True,
    complete_only: bool = True,
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each line of a JSON-lines file, streamed.

    ``complete_only``: a last line without its newline (another process may be appending it) is
    skipped rather than parsed.
    """
    line_limits = replace(limits, max_bytes=limits.max_line)
    for number, text in lines(path, limits, fix=fix):
        if complete_only and not text.endswith("\n"):
            return
        if text.strip():
            yield number, parse_json(text, path, line_limits, fix=fix, line=number, allow_nan=allow_nan)


# ---- YAML ---------------------------------------------------------------------------------------
def _yaml_budget(text: str, source: object, limits: Limits, fix: str | None, loader: Any) -> None:
    """Depth and expanded size from PyYAML's event stream (iterative: no recursion, no objects)."""
    import yaml

    sizes: dict[str, int] = {}
    stack: list[list[Any]] = [[None, 0]]  # [anchor, expanded nodes so far]
    for event in yaml.parse(text, Loader=loader):
        if _tagged(event, getattr(loader, "plain_tags", CORE_SCHEMA_TAGS)):
            raise BadFileError(
                source,
                f"the tag {_tag_name(event.tag)} is not allowed (it builds a type other than plain data; "
                "the core-schema tags !!str !!int !!float !!bool !!null !!seq !!map are)",
                fix,
                _line(event),
            )
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
                raise BadFileError(
                    source,
                    f"the alias *{messages.shown(event.anchor, limit=40)} is inside its own anchor"
                    " (a value that contains itself)",
                    fix,
                    _line(event),
                )
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
            raise BadFileError(
                source, f"expands to more than {limits.max_nodes} values (aliases counted)", fix, _line(event)
            )


_INT_TAG = "tag:yaml.org,2002:int"


def _sexagesimal_ok(event: Any, source: object, fix: str | None, loader: Any) -> None:
    """A base-60 integer (YAML 1.1's ``190:20:30``, which PyYAML's ``construct_yaml_int`` builds by
    multiplying a growing base per part: quadratic time, 45 s for a 900 KB value) within the bound Python
    puts on an integer read from text (``sys.get_int_max_str_digits()``, 4300 by default), which that
    construction bypasses. A base-60 value that long is out of range anyway, or all leading zeros."""
    import yaml

    value = event.value
    limit = sys.get_int_max_str_digits() or 4300
    if len(value) <= limit or ":" not in value:
        return
    tag = event.tag
    if event.implicit[0]:  # a plain scalar: what the loader's resolvers make of it (jsonargparse's)
        tag = loader.resolve(loader, yaml.ScalarNode, value, event.implicit)
    if tag == _INT_TAG:
        raise BadFileError(
            source,
            f"the base-60 integer {value[:24]}... is longer than {limit} characters "
            "(out of range: at most 2**63 - 1 in size)",
            fix,
            _line(event),
        )


#: The explicit tags a config may carry: the YAML core schema's (yaml.org/spec/1.2.2, 10.3; YAML 1.1's
#: types of the same names), which jsonargparse's loader
#: (``jsonargparse._loaders_dumpers.get_yaml_default_loader``, a PyYAML SafeLoader) builds as plain data:
#: ``lr: !!float 1e-3`` is 0.001, ``max_epochs: !!int "7"`` is 7.
#: The other tags its SafeLoader knows build other types (``!!set``, ``!!binary`` bytes, ``!!timestamp``,
#: ``!!omap``/``!!pairs`` tuples) and any other tag (``!!python/...``, ``!Ref``) has no constructor there:
#: each stays one line, refused before anything is built.
CORE_SCHEMA_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map")
)


def _tagged(event: Any, allowed: frozenset[str] = CORE_SCHEMA_TAGS) -> bool:
    """Whether ``event`` carries an explicit tag outside :data:`CORE_SCHEMA_TAGS` (``!!set``,
    ``!!python/...``, ``!custom``, ``!<...>``)."""
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
    hyper-parameter (``betas=(0.9, 0.999)``) is dumped by ``save_hparams_to_yaml`` (``yaml.dump``) as
    ``!!python/tuple``, and read back by ``load_hparams_from_yaml`` (``yaml.full_load``) as a tuple of its
    items (``FullConstructor.construct_python_tuple``); built here the same way, nothing else added."""
    import yaml

    class HparamsLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        plain_tags = CORE_SCHEMA_TAGS | {PYTHON_TUPLE}

    HparamsLoader.add_constructor(PYTHON_TUPLE, lambda loader, node: tuple(loader.construct_sequence(node)))
    return HparamsLoader


def parse_yaml(
    text: str, source: object, limits: Limits = YAML_LIMITS, *, fix: str | None = None, loader: Any = None
) -> Any:
    """``text`` (from ``source``) as plain data within ``limits``: no tag but the core schema's, no object.

    ``loader``: a subclass of PyYAML's safe loader that resolves plain values its own way (the CLI's
    configs resolve as jsonargparse does); PyYAML's safe loader by default.
    """
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
        raise BadFileError(
            source,
            f"YAML syntax error: {problem}",
            fix or "fix the YAML there",
            None if mark is None else mark.line + 1,
        ) from None
    except _Bad as err:
        raise BadFileError(source, str(err), fix) from None
    except KeyError as err:  # SafeConstructor.construct_yaml_bool: a !!bool value it has no meaning for
        value = messages.shown(err.args[0] if err.args else "", limit=40)
        raise BadFileError(source, f"!!bool {value!r} is not a YAML boolean (true or false)", fix) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as err:
        if "integer string conversion" in str(err):
            raise BadFileError(
                source, "an integer is out of range (at most 2**63 - 1 in size)", fix
            ) from None
        problem = messages.shown(messages.first_line(err), limit=120)
        raise BadFileError(source, f"not plain YAML ({problem})", fix) from None


def read_yaml(
    path: str | os.PathLike, limits: Limits = YAML_LIMITS, *, fix: str | None = None, loader: Any = None
) -> Any:
    """A whole YAML file as plain data within ``limits`` (``loader``: as in :func:`parse_yaml`)."""
    return parse_yaml(read_text(path, limits, fix=fix), path, limits, fix=fix, loader=loader)
