"""Every YAML a user hands the CLI is parsed by lit_gpu's bounded reader before jsonargparse sees it.

``--config FILE``, ``--config lit_gpu:NAME`` (a shipped file), a ``--print_config`` output fed back, a YAML
value on the command line: jsonargparse reads each through the loader of its parser's mode. LitGpuCLI's
parsers run in the mode :data:`MODE`, whose loader (:func:`load`) is
:func:`lit_gpu.textfiles.parse_yaml`: the text's size, nesting and expanded size (aliases counted) are
checked on PyYAML's event stream before anything is built, and a tag that builds anything but plain data
(``!!set``, ``!!python/...``, ``!custom``) is refused, so an alias bomb of a few hundred bytes is one line at
once and no tag can turn a section into something else; the YAML core schema's tags (``lr: !!float 1e-3``)
keep the meaning jsonargparse's own loader gives them (:data:`lit_gpu.textfiles.CORE_SCHEMA_TAGS`).
What the reader returns (plain dicts, lists, strings, numbers) is what
jsonargparse then applies, with the class paths that moved put to their public names
(:mod:`lit_gpu.run.store`, one table); values resolve as jsonargparse's own YAML loader resolves
them (``1e-3`` is a float, a date stays a string), so every legitimate config parses as before.

A file's problem is one line naming it and the line (``lit-gpu: error: FILE, line N: ...``, exit 2); a
command-line value that is not plain YAML stays a string, as jsonargparse leaves any value it cannot load.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from lit_gpu.run import store as class_paths
from lit_gpu.textfiles import BadFileError, Limits, parse_yaml, read_text
from lit_gpu.upstream import (
    jsonargparse_bounded_reads,
    jsonargparse_config_contexts,
    jsonargparse_yaml_loader,
)

#: the jsonargparse parser mode of LitGpuCLI's parsers (registered by :func:`install`)
MODE = "lit_gpu_yaml"
#: what to do about a config file the reader refused
FIX = "a config is plain YAML (mappings, lists, strings, numbers, true/false, null): fix that file"

#: what one config may hold (a file, standard input, a sub-config, a value on the command line): far above
#: any real config (the biggest shipped one is 2 KB with 95 values, a ``--print_config`` output 3.3 KB
#: with about 300), far below what jsonargparse handles slowly (300 000 keys: minutes and 260 MB)
#: (integers: any Python reads from text, as jsonargparse does: numpy's 128-bit ``SeedSequence().entropy``)
CONFIG_LIMITS = Limits(max_bytes=1 << 20, max_nodes=20_000)
#: how ``--config -`` is named in its errors
STDIN = "standard input (--config -)"

#: the --config file being read (jsonargparse hands its loader the text and the file's base name only)
reading: ContextVar[str | None] = ContextVar("lit_gpu_config_path", default=None)


class NotPlainYaml(ValueError):
    """A command-line value past the reader's rules: jsonargparse keeps such a value as a string."""


@contextmanager
def config_file(path: Any) -> Iterator[str | None]:
    """While jsonargparse reads the config file ``path``: its name for errors, and its text read once by
    the bounded reader (at most :data:`CONFIG_LIMITS` bytes, a regular file only, UTF-8; ``-``: standard
    input, as much), or ``None`` when ``path`` names no local file (jsonargparse says what is wrong with it,
    or reads a URL).

    What is checked is what is parsed: a file that grows after a size check, a symlink to a ``/proc``
    file that lists itself as empty, a FIFO or a device is one line, never read whole or waited on.
    """
    text = str(path)
    content = None
    if text == "-":  # standard input, never a file named "-" in the working folder
        content = read_stdin()
    else:
        try:
            os.stat(text)
        except OSError:
            pass
        else:
            content = read_text(text, CONFIG_LIMITS, fix=FIX)
    token = reading.set(STDIN if text == "-" else text)
    try:
        yield content
    finally:
        reading.reset(token)


def read_stdin() -> str:
    """Standard input (``--config -``), at most :data:`CONFIG_LIMITS` characters: ``yes | lit-gpu fit
    --config -`` is one line, never read to its end."""
    limit = CONFIG_LIMITS.max_bytes
    try:
        text = sys.stdin.read(limit + 1)
    except (OSError, UnicodeDecodeError) as err:
        raise BadFileError(STDIN, f"cannot be read ({err})", FIX) from err
    if len(text) > limit:
        raise BadFileError(STDIN, f"is longer than {limit} characters, more than a config holds", FIX)
    return text


def read_sub_config(path: str) -> str:
    """A file a config names (``data: sub.yaml``), read by the bounded reader and checked as a config is
    (no tag but the core schema's, within :data:`CONFIG_LIMITS`): a refusal names that file and its line.
    A text that is not YAML at all passes: jsonargparse reads files of lines too, and says itself what is
    wrong."""
    text = read_text(path, CONFIG_LIMITS, fix=FIX)
    try:
        parse_yaml(text, path, CONFIG_LIMITS, fix=FIX, loader=jsonargparse_yaml_loader())
    except BadFileError as err:
        if not err.problem.startswith("YAML syntax error"):
            raise
    return text


@contextmanager
def bounded_reads() -> Iterator[None]:
    """While a parser parses: a file a config points at (``data: other.yaml``, ``init_args: x.yaml``) is
    read by the bounded reader too (:func:`read_sub_config`), never whole whatever its size."""
    with jsonargparse_bounded_reads(read_sub_config):
        yield


@contextmanager
def relative_to(path: Any) -> Iterator[None]:
    """jsonargparse's own contexts while it parses the config file ``path`` (paths in it are relative to
    its folder; a file that includes itself is an error), as its ``parse_path`` sets them."""
    with jsonargparse_config_contexts(path):
        yield


def load(text: str, path: str | os.PathLike = "") -> Any:
    """The loader of :data:`MODE`: ``text`` (a config file's, or a value's) as plain data.

    Raises:
        BadFileError: a config file past the limits or with a tag outside the core schema (one line: file,
            line, fix).
        NotPlainYaml: a value from the command line that is not plain YAML (jsonargparse keeps the string).
    """
    source = reading.get() if path else None
    if source is not None:
        data = parse_yaml(text, source, CONFIG_LIMITS, fix=FIX, loader=jsonargparse_yaml_loader())
    else:
        try:
            data = parse_yaml(
                text, "a command-line value", CONFIG_LIMITS, fix=FIX, loader=jsonargparse_yaml_loader()
            )
        except BadFileError as err:
            raise NotPlainYaml(err.problem) from err
    # jsonargparse's own rule for values: "a" or "{a, b}" (keys without values) stays the string typed
    if isinstance(data, dict) and data and all(v is None for v in data.values()):
        keys = set(text.strip(" {}").replace(" ", "").split(","))
        if (len(data) == 1 and text.strip() == next(iter(data)) + ":") or keys == set(data):
            return text
    return class_paths.current(data)  # an old run's config.yaml names classes that moved


def install() -> None:
    """Register :data:`MODE` with jsonargparse (once; adds a mode, changes none of its own)."""
    import yaml
    from jsonargparse import get_loader, set_loader

    try:
        if get_loader(MODE) is load:
            return
    except KeyError:
        pass
    set_loader(MODE, load, exceptions=(yaml.YAMLError, NotPlainYaml), json_superset=True)
