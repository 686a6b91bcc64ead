"""``lit-gpu completion bash|zsh``: a shell completion script; ``--complete WORDS``: what it asks at each TAB.

The script is a few lines of shell that hand the line typed so far to ``lit-gpu completion
--complete-bash`` (zsh: the words, to ``--complete``), which answers NUL-separated candidates from the live
tables: the commands (:data:`lit_gpu.cli.main.COMMANDS`), the shipped recipes (``--config lit_gpu:<TAB>``,
``lit-gpu configs <TAB>``), files, and each command's flags. A candidate from the folder may be any name
(``x$(cmd).yaml``): bash gets each reply quoted for the quote open at the cursor
(:mod:`lit_gpu.cli.shell_words`), zsh quotes with ``compadd`` (no ``-Q``), so the completed line names the
file and runs nothing. Nothing of that imports torch or Lightning: a TAB costs one small Python start.

The flags of ``fit``/``validate``/``test``/``predict`` come from LitGpuCLI's parser, those of the tools from
their argparse parsers; both are built only by :func:`collect_flags` (it imports Lightning) and kept in
:mod:`lit_gpu.cli.completion_flags`, which ``python -m lit_gpu.cli.completion`` rewrites and a test
(tests/unit/cli/test_completion.py) compares with the parsers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from lit_gpu import recipes
from lit_gpu.cli import shell_words
from lit_gpu.cli.completion_flags import FLAGS
from lit_gpu.cli.main import COMMANDS, LIGHTNING_SUBCOMMANDS
from lit_gpu.upstream.tools import parser_actions, subcommands_action

SHELLS = ("bash", "zsh")
TOP_LEVEL_OPTIONS = ("-h", "--help", "--version")
#: tools that pass the flags they do not know on to a training job (``fit``'s flags complete there too)
PASS_FIT_FLAGS = ("bench", "sweep")
#: the config files a file flag's value may name, besides the shipped recipes
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")

BASH = r"""# bash completion for lit-gpu: eval "$(lit-gpu completion bash)" in ~/.bashrc
# Each TAB asks `lit-gpu completion --complete-bash` (commands, recipes, files, flags; no torch import),
# which answers each candidate already quoted for the shell (a file name runs nothing), NUL-separated.
_lit_gpu_complete() {
    local -a reply
    mapfile -t -d '' reply < <(
        command lit-gpu completion --complete-bash "$COMP_WORDBREAKS" "${COMP_LINE:0:COMP_POINT}" 2>/dev/null
    )
    COMPREPLY=("${reply[@]}")
    if [[ ${#COMPREPLY[@]} -eq 1 && "${COMPREPLY[0]}" == */ ]]; then compopt -o nospace 2>/dev/null; fi
    return 0
}
complete -F _lit_gpu_complete lit-gpu
"""

ZSH = r"""# zsh completion for lit-gpu: eval "$(lit-gpu completion zsh)" in ~/.zshrc, after compinit
# Each TAB asks `lit-gpu completion --complete WORDS` (commands, recipes, files, flags; no torch import),
# NUL-separated; compadd (no -Q) quotes each candidate for the line, so a file name runs nothing.
_lit_gpu_complete() {
    local -a reply folders others
    local c
    reply=("${(@0)$(command lit-gpu completion --complete -- "${(@Q)words[2,CURRENT]}" 2>/dev/null)}")
    for c in "${reply[@]}"; do
        [[ -z "$c" ]] && continue
        if [[ "$c" == */ ]]; then folders+=("$c"); else others+=("$c"); fi
    done
    (( ${#others} )) && compadd -- "${others[@]}"
    (( ${#folders} )) && compadd -S '' -- "${folders[@]}"
    return 0
}
compdef _lit_gpu_complete lit-gpu
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH}


def flags_of(command: str) -> list[str]:
    """The flags ``command`` accepts (from :data:`FLAGS`), ``fit``'s too where it passes them on."""
    own = list(FLAGS.get(command, ()))
    if command in PASS_FIT_FLAGS:
        own += [flag for flag in FLAGS.get("fit", ()) if flag not in own]
    return own


def paths(prefix: str, suffixes: tuple[str, ...] | None = None) -> list[str]:
    """Files and folders (``/`` appended) whose path starts with ``prefix``; only ``suffixes`` if given."""
    folder, slash, start = prefix.rpartition("/")
    where = os.path.expanduser(folder or "/") if slash else "."
    try:
        entries = sorted(os.scandir(where), key=lambda e: e.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.name.startswith(start) or (entry.name.startswith(".") and not start.startswith(".")):
            continue
        shown = folder + slash + entry.name
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            found.append(shown + "/")
        elif suffixes is None or entry.name.endswith(suffixes):
            found.append(shown)
    return found


def config_values(prefix: str, flag: str) -> list[str]:
    """Values of ``--config``/``-c`` (recipes, config files) or ``--search`` (sweep recipes, files)."""
    sweeps = flag == "--search"
    names = [recipes.PREFIX + n for n in recipes.names() if n.startswith("sweeps/") == sweeps]
    shipped = [n for n in names if n.startswith(prefix)]
    if prefix.startswith(recipes.PREFIX):
        return shipped
    return shipped + paths(prefix, CONFIG_SUFFIXES)


def candidates(words: Sequence[str]) -> list[str]:
    """What may complete the last of ``words`` (the words after ``lit-gpu``, the last one being typed)."""
    *before, cur = list(words) or [""]
    if not before:
        return [c for c in (*COMMANDS, *TOP_LEVEL_OPTIONS) if c.startswith(cur)]
    command, prev = before[0], before[-1]
    if prev in recipes.FILE_FLAGS:
        return config_values(cur, prev)
    flag, eq, value = cur.partition("=")
    if cur.startswith("-") and eq and flag in recipes.FILE_FLAGS:
        return [f"{flag}={v}" for v in config_values(value, flag)]
    if cur.startswith("-"):
        return [f for f in flags_of(command) if f.startswith(cur)]
    if command == "configs":
        return [n for n in recipes.names() if n.startswith(cur.removeprefix(recipes.PREFIX))]
    if command == "completion":
        return [s for s in SHELLS if s.startswith(cur)]
    if not cur and command in LIGHTNING_SUBCOMMANDS and (prev == command or not prev.startswith("-")):
        return flags_of(command)  # `lit-gpu fit <TAB>`: fit takes flags only
    return paths(cur)


def collect_flags() -> dict[str, list[str]]:
    """Every command's flags, read from the real parsers (imports Lightning and each tool's module).

    LitGpuCLI's subcommand parsers for ``fit``/``validate``/``test``/``predict``; each tool's argparse
    parser as its ``main(argv)`` builds it (stopped at its first parse).
    """
    from unittest import mock

    from lit_gpu.cli.lightning_cli import LitGpuCLI

    class _Built(Exception):
        pass

    class _ParserOnly(LitGpuCLI):
        def parse_arguments(self, parser: argparse.ArgumentParser, args: object) -> None:
            raise _Built(parser)

    flags: dict[str, list[str]] = {}
    try:
        _ParserOnly(args=[])
    except _Built as built:
        parser = built.args[0]
    subcommands = subcommands_action(parser)
    for name in LIGHTNING_SUBCOMMANDS:
        flags[name] = _options(subcommands.choices[name])

    def _stop(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Built(self)

    for name, (module, _) in COMMANDS.items():
        if name in LIGHTNING_SUBCOMMANDS:
            continue
        tool = importlib.import_module(module)
        with mock.patch.object(argparse.ArgumentParser, "parse_known_args", _stop):
            try:
                tool.main([])
            except _Built as built:
                flags[name] = _options(built.args[0])
    return flags


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser_actions(parser) for option in action.option_strings]


def write_flags(path: Path | None = None) -> Path:
    """Rewrite :mod:`lit_gpu.cli.completion_flags` from :func:`collect_flags`; returns its path."""
    path = Path(__file__).with_name("completion_flags.py") if path is None else path
    lines = [
        '"""Each command\'s flags for shell completion, read from the real parsers (generated: do not edit).',
        "",
        "Rewritten by ``python -m lit_gpu.cli.completion``; tests/unit/cli/test_completion.py checks it.",
        '"""',
        "",
        "FLAGS: dict[str, tuple[str, ...]] = {",
    ]
    for name, options in collect_flags().items():
        lines.append(f"    {json.dumps(name)}: (")
        lines += [f"        {json.dumps(option)}," for option in options]
        lines.append("    ),")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _answer(items: Sequence[str]) -> None:
    """``items`` NUL-separated on stdout, as the bytes of the names (a file name that is not UTF-8 is
    answered as it is on disk, not a UnicodeEncodeError that leaves every TAB without an answer)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(b"".join(os.fsencode(item) + b"\0" for item in items))
    sys.stdout.buffer.flush()


def main(argv: Sequence[str]) -> int:
    """``lit-gpu completion bash|zsh``; ``lit-gpu completion --complete [--] WORDS`` (the script's TAB)."""
    argv = list(argv)
    if argv[:1] == ["--complete"]:  # zsh: the words, unquoted; candidates as they are (compadd quotes)
        words = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        _answer(candidates(words))
        return 0
    if argv[:1] == ["--complete-bash"] and len(argv) == 3:  # bash: the line as typed; replies quoted
        words, typed = shell_words.split_line(argv[2])
        replies = shell_words.bash_replies(typed, candidates(words[1:]), argv[1])
        _answer(replies)
        return 0
    parser = argparse.ArgumentParser(
        prog="lit-gpu completion",
        allow_abbrev=False,
        description="Print a shell completion script for lit-gpu (commands, --config lit_gpu:NAME, flags). "
        'bash: eval "$(lit-gpu completion bash)" in ~/.bashrc; zsh: eval "$(lit-gpu completion zsh)" '
        "in ~/.zshrc after compinit.",
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    args = parser.parse_args(argv)
    sys.stdout.write(SCRIPTS[args.shell])
    return 0


if __name__ == "__main__":  # python -m lit_gpu.cli.completion: rewrite the flags table
    print(write_flags())
