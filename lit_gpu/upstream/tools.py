"""Private names of the tools around Lightning lit_gpu uses: jsonargparse's (and argparse's) parser
actions and YAML loader, optuna's trial ids. Importing this module imports none of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def parser_actions(parser: Any) -> list[Any]:
    """An argparse (or jsonargparse) parser's actions (``parser._actions``), in order."""
    return list(getattr(parser, "_actions", []))


def subcommands_action(parser: Any) -> Any:
    """The parser's subcommands action (an ``argparse._SubParsersAction``)."""
    import argparse

    return next(a for a in parser_actions(parser) if isinstance(a, argparse._SubParsersAction))


def widen_type(parser: Any, dest: str, widen: Callable[[Any], Any]) -> None:
    """Replace the type hint of the argument ``dest`` by ``widen(hint)``: jsonargparse offers no public way
    to widen the type of an argument added from a signature (``action._typehint``)."""
    for action in parser_actions(parser):
        typehint = getattr(action, "_typehint", None)
        if getattr(action, "dest", None) == dest and typehint is not None:
            action._typehint = widen(typehint)


def jsonargparse_yaml_loader() -> Any:
    """jsonargparse's YAML loader class (its resolvers: ``1e-3`` is a float, no timestamps), so that lit_gpu's
    bounded reader reads a config exactly as jsonargparse's own loader does (``_loaders_dumpers``; pinned)."""
    from jsonargparse._loaders_dumpers import get_yaml_default_loader

    return get_yaml_default_loader()


@contextmanager
def jsonargparse_config_contexts(path: Any) -> Iterator[None]:
    """The two contexts jsonargparse's ``parse_path`` sets around parsing the config file ``path`` (paths in
    it relative to its folder, a file including itself an error), for a text lit_gpu read itself
    (``_util.load_config_path_context``, ``_paths.change_to_path_dir``; pinned)."""
    from jsonargparse._optionals import _get_config_read_mode
    from jsonargparse._paths import Path, change_to_path_dir
    from jsonargparse._util import load_config_path_context

    fpath = Path(path, mode=_get_config_read_mode())
    with load_config_path_context(fpath), change_to_path_dir(fpath):
        yield


@contextmanager
def jsonargparse_bounded_reads(read: Callable[[str], str]) -> Iterator[None]:
    """While it lasts, jsonargparse reads a local file it is pointed at from inside a config (a sub-config
    such as ``data: other.yaml`` or ``init_args: x.yaml``, a list from a file) as ``read(path)``, not as
    ``open(path).read()`` of any size (``Path.read_text``, swapped for the call; ``Path._std_io``; pinned).
    Standard input, URLs and fsspec paths stay jsonargparse's own."""
    from jsonargparse import Path

    original = Path.read_text

    def read_text(self: Path) -> str:
        if self._std_io or self.is_url or self.is_fsspec:
            return original(self)
        return read(self.absolute)

    Path.read_text = read_text  # type: ignore[method-assign]
    try:
        yield
    finally:
        Path.read_text = original  # type: ignore[method-assign]


def trial_id(trial: Any) -> int:
    """An optuna trial's storage id (``Trial._trial_id``, ``FrozenTrial._trial_id``; not ``number``)."""
    return trial._trial_id


__all__ = [
    "jsonargparse_bounded_reads",
    "jsonargparse_config_contexts",
    "jsonargparse_yaml_loader",
    "parser_actions",
    "subcommands_action",
    "trial_id",
    "widen_type",
]
