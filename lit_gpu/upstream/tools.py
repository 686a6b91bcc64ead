"""Private names of the tools around Lightning lit_gpu uses: jsonargparse's (and argparse's) parser
actions and YAML loader, optuna's trial ids. Importing this module imports none of them."""

from __future__ import annotations

from collections.abc import Callable
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


def trial_id(trial: Any) -> int:
    """An optuna trial's storage id (``Trial._trial_id``, ``FrozenTrial._trial_id``; not ``number``)."""
    return trial._trial_id


__all__ = ["jsonargparse_yaml_loader", "parser_actions", "subcommands_action", "trial_id", "widen_type"]
