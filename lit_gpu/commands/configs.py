"""``lit-gpu configs``: the shipped recipes by name, with their first comment line; ``NAME``: the file.

lit-gpu configs                      # name + what it is, one line each
lit-gpu configs mnist > my.yaml      # the recipe's text, to copy and edit
lit-gpu configs --path trainer/gpu   # where the file is
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lit_gpu.cli import recipes


def main(argv: Sequence[str]) -> int:
    """``lit-gpu configs [NAME] [--path]``."""
    parser = argparse.ArgumentParser(
        prog="lit-gpu configs",
        allow_abbrev=False,
        description="The configs shipped with lit_gpu; use one as --config lit_gpu:NAME "
        "(compose several: --config lit_gpu:simple --config lit_gpu:trainer/cpu).",
    )
    parser.add_argument("name", nargs="?", default=None, help="print this recipe's YAML (e.g. trainer/gpu)")
    parser.add_argument("--path", action="store_true", help="print the file's path instead of its text")
    args = parser.parse_args(list(argv))
    if args.name is None:
        names = recipes.names()
        width = max(len(recipes.PREFIX + n) for n in names)
        for name in names:
            sys.stdout.write(f"{recipes.PREFIX + name:<{width}}  {recipes.describe(name)}\n")
        return 0
    path = recipes.path(args.name)
    sys.stdout.write(f"{path}\n" if args.path else path.read_text())
    return 0
