"""Every YAML a user hands the CLI is parsed by lit_gpu's bounded reader before jsonargparse sees it.

``--config FILE``, ``--config lit_gpu:NAME`` (a shipped file), a ``--print_config`` output fed back, a YAML
value on the command line: jsonargparse reads each through the loader of its parser's mode. LitGpuCLI's
parsers run in the mode :data:`MODE`, whose loader (:func:`load`) is
:func:`lit_gpu.files.text.parse_yaml`: the text's size, nesting and expanded size (aliases counted) are
checked on PyYAML's event stream before anything is built, and a tag (``!!set``, ``!!python/...``,
``!custom``) is refused, so an alias bomb of a few hundred bytes is one line at once and no tag can turn
a section into something else. What the reader returns (plain dicts, lists, strings, numbers) is what
jsonargparse then applies; values resolve as jsonargparse's own YAML loader resolves them (``1e-3`` is a
float, a date stays a string), so every legitimate config parses as before.

A file's problem is one line naming it and the line (``lit-gpu: error: FILE, line N: ...``, exit 2); a
command-line value that is not plain YAML stays a string, as jsonargparse leaves any value it cannot load.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from lit_gpu.files.text import YAML_LIMITS, BadFileError, parse_yaml
from lit_gpu.upstream.tools import jsonargparse_yaml_loader

#: the jsonargparse parser mode of LitGpuCLI's parsers (registered by :func:`install`)
MODE = "lit_gpu_yaml"
#: what to do about a config file the reader refused
FIX = "a config is plain YAML (mappings, lists, strings, numbers, true/false, null): fix that file"

#: the --config file being read (jsonargparse hands its loader the text and the file's base name only)
reading: ContextVar[str | None] = ContextVar("lit_gpu_config_path", default=None)


class NotPlainYaml(ValueError):
    """A command-line value past the reader's rules: jsonargparse keeps such a value as a string."""


@contextmanager
def config_file(path: Any) -> Iterator[None]:
    """While jsonargparse reads the config file ``path``: its name for errors; a file too big or not a
    regular file (a FIFO, a device) is refused before anything reads it."""
    text = str(path)
    try:
        info = os.stat(text)
    except OSError:
        info = None  # jsonargparse says what is wrong with the path (or reads a URL)
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise BadFileError(text, "is not a regular file", "pass a YAML file")
    if info is not None and info.st_size > YAML_LIMITS.max_bytes:
        raise BadFileError(text, f"is larger than {YAML_LIMITS.max_bytes} bytes", FIX)
    token = reading.set(text)
    try:
        yield
    finally:
        reading.reset(token)


def load(text: str, path: str | os.PathLike = "") -> Any:
    """The loader of :data:`MODE`: ``text`` (a config file's, or a value's) as plain data.

    Raises:
        BadFileError: a config file past the limits or with a tag (one line: file, line, fix).
        NotPlainYaml: a value from the command line that is not plain YAML (jsonargparse keeps the string).
    """
    source = reading.get() if path else None
    if source is not None:
        data = parse_yaml(text, source, YAML_LIMITS, fix=FIX, loader=jsonargparse_yaml_loader())
    else:
        try:
            data = parse_yaml(
                text, "a command-line value", YAML_LIMITS, fix=FIX, loader=jsonargparse_yaml_loader()
            )
        except BadFileError as err:
            raise NotPlainYaml(err.problem) from err
    # jsonargparse's own rule for values: "a" or "{a, b}" (keys without values) stays the string typed
    if isinstance(data, dict) and data and all(v is None for v in data.values()):
        keys = set(text.strip(" {}").replace(" ", "").split(","))
        if (len(data) == 1 and text.strip() == next(iter(data)) + ":") or keys == set(data):
            return text
    return data


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
