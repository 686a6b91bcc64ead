"""jsonargparse's multi-line parse errors as one line that keeps the real cause.

jsonargparse reports a bad ``class_path`` as a tree: the outer key (``model``), every Union branch it
tried (``Expected a NoneType``...) and, nested inside, the reason the class could not be used
(``No module named 'mymod'``, ``module 'torch.optim' has no attribute 'Adamm'``). :func:`concise_parse_error`
looks for those reasons first and answers with what, where and the fix; other errors keep the innermost
key, what was expected and what was given.
"""

from __future__ import annotations

import difflib
import inspect
import os
import pkgutil
import re
import sys
from typing import Any

from lit_gpu import messages
from lit_gpu.upstream.tools import parser_actions

_KEY = re.compile(r'Parser key "([^"]+)"')
_CLASS_PATHS = re.compile(
    r"Problem with given class_path '([^']+)'|Expected a path but (\S+) either not accessible"
    r"|class_path='([^']+)'|Given value: ([\w.]+)$",
    re.M,
)
_NO_MODULE = re.compile(r"No module named '([^']+)'")
_NO_ATTRIBUTE = re.compile(r"module '([^']+)' has no attribute '([^']+)'")
# jsonargparse >= 4.44 wording, or 4.39-4.43's ("Key 'x' is not expected", "Key "x" is required but ...")
_NOT_ACCEPTED = re.compile(r"(?:Option|Key) '([^']+)' is not (?:accepted|expected)")
_REQUIRED = re.compile(
    r"the following arguments are required: ([\w., ]+)|Key \"([\w.]+)\" is required but not included"
)
_CLASS_PATH_VALUE = re.compile(r"class_path='([^']+)'")
_GIVEN_CLASS = re.compile(r"Problem with given class_path '([^']+)'")
_NOT_SUBCLASS = re.compile(r"does not correspond to a subclass of (\w+)")
_CLASS_REPR = re.compile(r"<class '([\w.]+)'>")


def _key_path(message: str) -> str:
    """``model.optimizer.lr`` from the nested ``Parser key "..."`` headers (outermost first)."""
    keys: list[str] = []
    for key in _KEY.findall(message):
        if not keys or keys[-1] != key:
            keys.append(key)
    return ".".join(keys)


def _class_paths(message: str) -> list[str]:
    return [next(g for g in groups if g) for groups in _CLASS_PATHS.findall(message)]


def _pick_class_path(candidates: list[str], module: str) -> str | None:
    for path in reversed(candidates):
        if path == module or path.startswith(module + "."):
            return path
    return candidates[-1] if candidates else None


def _close(name: str, options: list[str], prefix: str = "") -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f" (did you mean {prefix}{match[0]}?)" if match else ""


def _loaded(module: str) -> Any:
    # only modules already imported (jsonargparse imported them): nothing is imported to suggest a name
    return sys.modules.get(module)


def _missing_module(key: str, module: str, candidates: list[str]) -> str:
    class_path = _pick_class_path(candidates, module) or module
    parent, _, leaf = module.rpartition(".")
    if parent and _loaded(parent) is not None:  # a typo in a submodule of a package that exists
        names = [m.name for m in pkgutil.iter_modules(getattr(_loaded(parent), "__path__", []))]
        return messages.NO_SUCH_MODULE.format(
            key=key, class_path=class_path, module=module, suggestion=_close(leaf, names, parent + ".")
        )
    if class_path.split(".")[0] == module.split(".")[0]:  # the class's own top-level module
        top = module.split(".")[0]
        here = [p for p in (f"{top}.py", f"{top}/") if os.path.exists(p)]
        if here:  # `lit-gpu` (a console script) does not put the working folder on sys.path
            return messages.MODULE_HERE_NOT_ON_PATH.format(
                key=key, class_path=class_path, module=module, found=here[0]
            )
        return messages.MODULE_NOT_ON_PATH.format(key=key, class_path=class_path, module=module)
    return messages.DEPENDENCY_MISSING.format(key=key, class_path=class_path, module=module)


def _no_attribute(key: str, module: str, name: str) -> str:
    loaded = _loaded(module)
    options = [n for n in dir(loaded) if not n.startswith("_")] if loaded is not None else []
    return messages.NO_SUCH_CLASS.format(
        key=key, module=module, name=name, suggestion=_close(name, options, module + ".")
    )


def _class_after(message: str, position: int, candidates: list[str]) -> str:
    """The class a nested error is about: the ``Got value``/``Given value`` right after the cause."""
    match = _CLASS_PATH_VALUE.search(message, position)
    if match and not match.group(1).startswith("typing."):  # typing.Union: no class_path was given
        return match.group(1)
    return (
        "its class (no class_path given there?)" if match else (candidates[-1] if candidates else "its class")
    )


def _not_accepted(key: str, option: str, class_path: str) -> str:
    module, _, name = class_path.rpartition(".")
    target = getattr(_loaded(module), name, None) if module else None
    try:
        params = [p for p in inspect.signature(target).parameters if p != "self"] if target else []
    except (TypeError, ValueError):
        params = []
    return messages.UNKNOWN_ARGUMENT.format(
        key=key, class_path=class_path, option=option, suggestion=_close(option, params)
    )


def explain_cause(message: str) -> str | None:
    """The one-line answer for an import/class problem inside a parse error, or ``None``."""
    key = _key_path(message) or "a class_path"
    candidates = _class_paths(message)
    if match := _NO_MODULE.search(message):
        return _missing_module(key, match.group(1), candidates)
    if match := _NO_ATTRIBUTE.search(message):
        return _no_attribute(key, match.group(1), match.group(2))
    if match := _NOT_ACCEPTED.search(message):
        class_path = _class_after(message, match.end(), candidates)
        after = _CLASS_PATH_VALUE.search(message, match.end())
        given = _GIVEN_CLASS.findall(message, 0, match.start())  # the class tried where it failed (+=Name)
        if given and after is None:  # no class_path value after it: the NestedArg of a --key.name flag
            class_path = given[-1]
        return _not_accepted(key, match.group(1), class_path)
    if (match := _REQUIRED.search(message)) and _key_path(message):  # else argparse's own: plain
        class_path = _class_after(message, match.end(), candidates)
        required = match.group(1) or match.group(2)
        names = [n.strip().rpartition(".")[2] for n in required.split(",") if n.strip()]
        return messages.MISSING_INIT_ARGS.format(
            key=key, class_path=class_path, names=", ".join(names), example=f"--{key}.init_args.{names[0]}"
        )
    if match := _NOT_SUBCLASS.search(message):
        class_path = candidates[-1] if candidates else "the class_path given"
        return messages.NOT_A_SUBCLASS.format(key=key, class_path=class_path, base=match.group(1))
    return None


def _innermost(lines: list[str]) -> list[str]:
    """The lines of the deepest ``Parser key`` block (more indented than its header)."""
    starts = [i for i, line in enumerate(lines) if _KEY.search(line)]
    if not starts:
        return lines
    start = starts[-1]
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line)
    return block


_NOISE = ("Expected a <class 'NoneType'>", "Expected a path but", "Expected a dot import path string")


def concise_parse_error(message: str, prog: str, parser: Any = None) -> str:
    """One line from jsonargparse's multi-line error: an unknown flag with the closest of ``parser``'s
    (:func:`unknown_flags`), the cause when a class could not be used, else the key, what was expected and
    what was given."""
    cause = (unknown_flags(message, parser, prog) if parser is not None else None) or explain_cause(message)
    if cause:
        return cause
    raw = [ln for ln in message.splitlines() if ln.strip()]
    if not raw:
        return f"invalid arguments; run '{prog} --help' for the options"
    key = _key_path(message)
    lines = [ln.strip().lstrip("- ").strip() for ln in _innermost(raw)]
    head = f'Parser key "{key}"' if key else lines[0].rstrip(":")
    keep = [head]
    expected = sorted({ln for ln in lines[1:] if ln.startswith("Expected")})
    useful = [ln for ln in expected if not ln.startswith(_NOISE)]
    if useful:
        expected = useful
    if expected:
        keep.append(" or ".join(expected))
    keep.extend(re.sub(r"\. Got value: .*$", "", ln) for ln in lines[1:] if ln.startswith("Given value:"))
    if len(keep) == 1 and len(lines) > 1:
        keep.append(lines[-1])
    elif len(keep) == 1 and key and _KEY.search(lines[0]):
        tail = _KEY.split(lines[0])[-1].lstrip(":").strip()
        if tail:
            keep.append(tail)
    text = _CLASS_REPR.sub(r"\1", "; ".join(keep))
    return text + f"; run '{prog} --help' for the options"


_UNRECOGNIZED = "unrecognized arguments:"
_NOT_ACCEPTED_KEY = re.compile(
    r"^(?:Subcommand '\w+'|Group '([\w.]+)') does not accept option '([^']+)'$", re.M
)  # a group's: a config file's key under trainer:, model:... (jsonargparse's wording)


def unknown_flags(message: str, parser: Any, prog: str) -> str | None:
    """``unknown flag --trainer.max_epoch (did you mean --trainer.max_epochs?)`` for argparse's
    ``unrecognized arguments: ...`` (and the key meant for jsonargparse's ``does not accept option`` of a
    config file's key), each held against ``parser``'s own options; else ``None``.

    The parser takes flags exactly (``allow_abbrev=False``): a prefix of a flag is a typo, as a misspelling.
    """
    options = [option for action in parser_actions(parser) for option in action.option_strings]
    if match := _NOT_ACCEPTED_KEY.search(message):  # a key in a config file: named as the file names it
        subparsers = next(
            (a for a in parser_actions(parser) if hasattr(a, "choices") and a.nargs == "A..."), None
        )
        for sub in dict(getattr(subparsers, "choices", None) or {}).values():  # the subcommands' keys
            options += [option for action in parser_actions(sub) for option in action.option_strings]
        keys = sorted({option.removeprefix("--") for option in options})
        first = message.splitlines()[0].strip()
        key = f"{match.group(1)}.{match.group(2)}" if match.group(1) else match.group(2)  # a group's key
        return f"{first}{_close(key, keys)}; run '{prog} --help' for the options"
    if not message.startswith(_UNRECOGNIZED):
        return None
    words = message[len(_UNRECOGNIZED) :].split()
    flags = [word.partition("=")[0] for word in words if word.startswith("-")]
    if not flags:
        return None
    named = "; ".join(f"unknown flag {flag}{_close(flag, options)}" for flag in flags[:3])
    more = f"; and {len(flags) - 3} more" if len(flags) > 3 else ""
    return messages.UNKNOWN_FLAG.format(flags=named + more, prog=prog)


def yaml_error(err: BaseException | None, path: str) -> str | None:
    """``configs/x.yaml, line 5, column 6: ...`` for a YAML syntax error in a ``--config`` file."""
    cause = getattr(err, "__cause__", None)
    mark = getattr(cause, "problem_mark", None)
    if cause is None or mark is None:
        return None
    problem = getattr(cause, "problem", None) or messages.first_line(cause)
    context = getattr(cause, "context", None)
    context_mark = getattr(cause, "context_mark", None)
    if context and context_mark is not None:
        problem += f" ({context} started at line {context_mark.line + 1})"
    return messages.YAML_SYNTAX.format(path=path, line=mark.line + 1, column=mark.column + 1, problem=problem)
